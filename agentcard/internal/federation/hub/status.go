package hub

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kagenti/platform/agentcard/api/v1alpha1"
)

// LastSeenWriteInterval is how stale status.lastSeen may be before it is written on its own (a
// heartbeat does not cost a status write).
const LastSeenWriteInterval = 15 * time.Second

// RenderStatus is the FederatedCluster status for a registration and its member's state.
func RenderStatus(reg Registration, m MemberStatus) v1alpha1.FederatedClusterStatus {
	var st v1alpha1.FederatedClusterStatus
	st.ObservedGeneration = reg.Generation
	st.PeerSpiffeID, st.ClusterID = m.PeerID, m.ClusterID
	if !m.LastSeen.IsZero() {
		t := metav1.NewTime(m.LastSeen.UTC().Truncate(time.Second))
		st.LastSeen = &t
	}
	st.Cards, st.RefusedCards, st.Revision = int32(m.Cards), int32(m.Refused), m.Revision
	if m.Stale {
		st.StaleCards = int32(m.Cards)
	}
	st.Refusals = m.Refusals

	switch {
	case m.Connected:
		st.Set(v1alpha1.ConditionConnected, metav1.ConditionTrue, v1alpha1.ReasonStreamOpen, m.ConnMessage)
	case !m.Known || m.ConnReason == "":
		st.Set(v1alpha1.ConditionConnected, metav1.ConditionFalse, v1alpha1.ReasonNeverSeen, "no member agent has connected to this hub replica since it became the leader")
	default:
		st.Set(v1alpha1.ConditionConnected, metav1.ConditionFalse, m.ConnReason, m.ConnMessage)
	}
	if m.Refused > 0 {
		first := m.Refusals[0]
		st.Set(v1alpha1.ConditionCardsAccepted, metav1.ConditionFalse, v1alpha1.ReasonCardRefused,
			fmt.Sprintf("%d of the member's cards refused; %s/%s: %s: %s", m.Refused, first.Namespace, first.Name, first.Reason, first.Message))
	} else {
		st.Set(v1alpha1.ConditionCardsAccepted, metav1.ConditionTrue, v1alpha1.ReasonAllCardsAccepted, fmt.Sprintf("%d cards accepted", m.Cards))
	}
	if reg.Endpoint != nil {
		st.TrustBundle = reg.FetchedStatus
		switch {
		case reg.FetchReason != "":
			st.Set(v1alpha1.ConditionTrustBundleCurrent, metav1.ConditionFalse, reg.FetchReason, reg.FetchMessage+"; "+bundleInEffect(reg))
		case reg.FetchedStatus != nil:
			st.Set(v1alpha1.ConditionTrustBundleCurrent, metav1.ConditionTrue, v1alpha1.ReasonBundleRefreshed,
				fmt.Sprintf("fetched from %s at %s: %s", reg.Endpoint.URL, reg.FetchedStatus.RefreshedAt.UTC().Format(time.RFC3339), bundleInEffect(reg)))
		default:
			st.Set(v1alpha1.ConditionTrustBundleCurrent, metav1.ConditionFalse, v1alpha1.ReasonBundlePending,
				fmt.Sprintf("not fetched from %s yet; spec.trustBundle is in effect", reg.Endpoint.URL))
		}
	}
	switch {
	case !reg.Usable():
		st.Set(v1alpha1.ConditionFederatedReady, metav1.ConditionFalse, reg.Reason, reg.Message)
	case m.Withdrawn:
		st.Set(v1alpha1.ConditionFederatedReady, metav1.ConditionFalse, v1alpha1.ReasonWithdrawn,
			fmt.Sprintf("the member was silent for more than the grace period (%s); its cards are withdrawn", reg.Grace))
	case m.Stale:
		st.Set(v1alpha1.ConditionFederatedReady, metav1.ConditionFalse, v1alpha1.ReasonStale,
			fmt.Sprintf("the member was silent for more than the TTL (%s); its %d cards are served marked stale until the grace period (%s) ends", reg.TTL, m.Cards, reg.Grace))
	case m.Connected:
		st.Set(v1alpha1.ConditionFederatedReady, metav1.ConditionTrue, v1alpha1.ReasonCardsServed, fmt.Sprintf("%d cards served", m.Cards))
	case m.Known && m.ConnReason != "":
		st.Set(v1alpha1.ConditionFederatedReady, metav1.ConditionFalse, m.ConnReason, m.ConnMessage)
	default:
		st.Set(v1alpha1.ConditionFederatedReady, metav1.ConditionFalse, v1alpha1.ReasonNeverSeen, "waiting for the member agent to connect")
	}
	return st
}

// StatusWriter is the leader's loop: it reloads the registrations, ages the members and writes each
// FederatedCluster's status when it changed.
type StatusWriter struct {
	Client   client.Client
	Registry *Registry
	Store    *Store
	Clock    clock.WithTicker
	Interval time.Duration
	Log      logr.Logger
}

// NeedLeaderElection: only the leader holds member streams, so only it writes their status.
func (w *StatusWriter) NeedLeaderElection() bool { return true }

// Start runs the loop until ctx ends.
func (w *StatusWriter) Start(ctx context.Context) error {
	t := w.Clock.NewTicker(w.Interval)
	defer t.Stop()
	for {
		if err := w.Sync(ctx); err != nil && ctx.Err() == nil {
			w.Log.Error(err, "federation status sync failed")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
		}
	}
}

// Sync does one pass.
func (w *StatusWriter) Sync(ctx context.Context) error {
	var list v1alpha1.FederatedClusterList
	if err := w.Client.List(ctx, &list); err != nil {
		return err
	}
	w.Registry.Replace(list.Items)
	w.Store.Sweep(w.Registry)
	for i := range list.Items {
		fc := &list.Items[i]
		reg, _ := w.Registry.Get(fc.Name)
		want := RenderStatus(reg, w.Store.Status(fc.Name))
		keepTransitionTimes(&want, &fc.Status)
		if !statusChanged(&fc.Status, &want) {
			continue
		}
		orig := fc.DeepCopy()
		fc.Status = want
		if err := w.Client.Status().Patch(ctx, fc, client.MergeFrom(orig)); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("FederatedCluster %s status: %w", fc.Name, err)
		}
	}
	return nil
}

// keepTransitionTimes carries lastTransitionTime over for conditions whose status did not change.
func keepTransitionTimes(want, have *v1alpha1.FederatedClusterStatus) {
	for i := range want.Conditions {
		c := &want.Conditions[i]
		if old := have.Condition(c.Type); old != nil && old.Status == c.Status {
			c.LastTransitionTime = old.LastTransitionTime
		}
	}
}

// statusChanged ignores a lastSeen that moved by less than LastSeenWriteInterval.
func statusChanged(have, want *v1alpha1.FederatedClusterStatus) bool {
	h, w := have.DeepCopy(), want.DeepCopy()
	if h.LastSeen != nil && w.LastSeen != nil && w.LastSeen.Sub(h.LastSeen.Time) < LastSeenWriteInterval {
		w.LastSeen = h.LastSeen
	}
	return !equality.Semantic.DeepEqual(h, w)
}

// bundleInEffect says which bundle the hub trusts for the member.
func bundleInEffect(reg Registration) string {
	if f := reg.FetchedStatus; f != nil {
		seq := ""
		if f.SequenceNumber != nil {
			seq = fmt.Sprintf(", sequence %d", *f.SequenceNumber)
		}
		return fmt.Sprintf("the fetched bundle is in effect (%d X.509 authorities%s)", f.Authorities, seq)
	}
	return "spec.trustBundle is in effect"
}
