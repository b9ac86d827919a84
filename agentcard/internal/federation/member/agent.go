package member

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kagenti/platform/agentcard/api/v1alpha1"
	"github.com/kagenti/platform/agentcard/internal/federation/wire"
)

// The member agent reads the About API's cluster ID, when the cluster has one.
// +kubebuilder:rbac:groups=about.k8s.io,resources=clusterproperties,verbs=get

// ClusterPropertyGVK is the About API (KEP-2149) ClusterProperty.
var ClusterPropertyGVK = schema.GroupVersionKind{Group: "about.k8s.io", Version: "v1alpha1", Kind: "ClusterProperty"}

// Exported says what of an AgentCard the member publishes: only a card labelled
// kagenti.io/export=true whose Verified condition is True for its current generation, with the
// card and the signer the member verified. Anything else is withdrawn.
func Exported(c *v1alpha1.AgentCard) (card []byte, spiffeID string, verifiedAt time.Time, ok bool) {
	if c.Labels[v1alpha1.LabelExport] != "true" || c.DeletionTimestamp != nil {
		return nil, "", time.Time{}, false
	}
	v := meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ConditionVerified)
	if v == nil || v.Status != "True" || v.ObservedGeneration != c.Generation {
		return nil, "", time.Time{}, false
	}
	if c.Status.Card == nil || len(c.Status.Card.Raw) == 0 || c.Status.Signature == nil || c.Status.Signature.SpiffeID == "" {
		return nil, "", time.Time{}, false
	}
	return c.Status.Card.Raw, c.Status.Signature.SpiffeID, v.LastTransitionTime.Time, true
}

// Watch keeps log in step with the AgentCards in c's informer.
func Watch(ctx context.Context, c cache.Cache, log *Log) error {
	inf, err := c.GetInformer(ctx, &v1alpha1.AgentCard{})
	if err != nil {
		return err
	}
	sync := func(obj any) {
		ac, ok := obj.(*v1alpha1.AgentCard)
		if !ok {
			return
		}
		if card, id, at, ok := Exported(ac); ok {
			log.Put(ac.Namespace, ac.Name, card, id, at)
		} else {
			log.Remove(ac.Namespace, ac.Name)
		}
	}
	_, err = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    sync,
		UpdateFunc: func(_, obj any) { sync(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if ac, ok := obj.(*v1alpha1.AgentCard); ok {
				log.Remove(ac.Namespace, ac.Name)
			}
		},
	})
	return err
}

// ClusterID reads the About API's cluster.clusterset.k8s.io; "" when the cluster has none.
func ClusterID(ctx context.Context, r client.Reader) (string, error) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(ClusterPropertyGVK)
	err := r.Get(ctx, types.NamespacedName{Name: v1alpha1.ClusterPropertyClusterID}, u)
	switch {
	case err == nil:
		v, _, _ := unstructured.NestedString(u.Object, "spec", "value")
		return v, nil
	case meta.IsNoMatchError(err) || client.IgnoreNotFound(err) == nil:
		return "", nil
	}
	return "", fmt.Errorf("reading the About API ClusterProperty %s: %w", v1alpha1.ClusterPropertyClusterID, err)
}

// Agent streams a Log to the hub.
type Agent struct {
	// Cluster is the member's registration name on the hub.
	Cluster string
	// ClusterID is the About API cluster ID sent in Hello ("" without one).
	ClusterID string
	// HubAddress is host:port of the hub's federation endpoint.
	HubAddress string
	// TLS is the member's mutual TLS (tlsid.ClientConfig).
	TLS *tls.Config
	Log *Log
	// Dialer, when set, opens the connection (tests count bytes with it).
	Dialer func(ctx context.Context, addr string) (net.Conn, error)
	// MinBackoff and MaxBackoff bound the wait between attempts (1s and 30s by default).
	MinBackoff, MaxBackoff time.Duration
	Logger                 logr.Logger

	epoch string
	// Sessions counts the streams the hub welcomed; Acked is the last revision the hub acknowledged.
	Sessions atomic.Int64
	Acked    atomic.Int64
}

// NeedLeaderElection: one member agent streams at a time (the hub keeps one stream per member).
func (a *Agent) NeedLeaderElection() bool { return true }

// Start connects and keeps the stream up until ctx ends.
func (a *Agent) Start(ctx context.Context) error {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	a.epoch = hex.EncodeToString(b)
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(credentials.NewTLS(a.TLS)),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(wire.Codec{})),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 30 * time.Second, Timeout: 10 * time.Second, PermitWithoutStream: true}),
	}
	if a.Dialer != nil {
		opts = append(opts, grpc.WithContextDialer(a.Dialer))
	}
	conn, err := grpc.NewClient("passthrough:///"+a.HubAddress, opts...)
	if err != nil {
		return err
	}
	defer conn.Close()
	minB, maxB := a.MinBackoff, a.MaxBackoff
	if minB <= 0 {
		minB = time.Second
	}
	if maxB <= 0 {
		maxB = 30 * time.Second
	}
	wait := minB
	for ctx.Err() == nil {
		welcomed, err := a.session(ctx, conn)
		if ctx.Err() != nil {
			return nil
		}
		if welcomed {
			wait = minB
		}
		a.Logger.Info("federation stream ended; reconnecting", "hub", a.HubAddress, "error", errString(err), "in", wait.String())
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		wait = min(2*wait, maxB)
	}
	return nil
}

// session runs one stream: Hello, Welcome, what the hub lacks, then changes and heartbeats.
func (a *Agent) session(ctx context.Context, conn *grpc.ClientConn) (welcomed bool, err error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stream, err := conn.NewStream(ctx, &wire.ServiceDesc.Streams[0], wire.StreamMethod, grpc.WaitForReady(true))
	if err != nil {
		return false, err
	}
	if err := stream.SendMsg(&wire.MemberFrame{Hello: &wire.Hello{Version: wire.ProtocolVersion, Cluster: a.Cluster, ClusterID: a.ClusterID, Epoch: a.epoch}}); err != nil {
		return false, err
	}
	var first wire.HubFrame
	if err := stream.RecvMsg(&first); err != nil {
		return false, err
	}
	if first.Welcome == nil {
		return false, errors.New("the hub did not answer hello with welcome")
	}
	a.Sessions.Add(1)
	go func() {
		for {
			var f wire.HubFrame
			if err := stream.RecvMsg(&f); err != nil {
				cancel(err)
				return
			}
			if f.Ack != nil {
				a.Acked.Store(f.Ack.Revision)
				a.Log.Compact(f.Ack.Revision)
			}
		}
	}()
	sent := first.Welcome.ResumeFrom
	full := sent == 0 || sent > a.Log.Head()
	if full {
		sent = 0
	}
	if sent, err = a.send(stream, sent, full); err != nil {
		return true, err
	}
	hb := time.Duration(first.Welcome.HeartbeatMillis) * time.Millisecond
	if hb <= 0 {
		hb = 10 * time.Second
	}
	ticker := time.NewTicker(hb)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			_ = stream.CloseSend()
			return true, context.Cause(ctx)
		case <-a.Log.Changed():
			if sent, err = a.send(stream, sent, false); err != nil {
				return true, err
			}
		case <-ticker.C:
			if err := stream.SendMsg(&wire.MemberFrame{Heartbeat: &wire.Heartbeat{}}); err != nil {
				return true, err
			}
		}
	}
}

// send sends the changes after rev and a Flush; it returns the head sent.
func (a *Agent) send(stream grpc.ClientStream, rev int64, full bool) (int64, error) {
	frames, head := a.Log.Since(rev, full)
	if len(frames) == 0 && !full {
		return rev, nil
	}
	for i := range frames {
		if err := stream.SendMsg(&frames[i]); err != nil {
			return rev, err
		}
	}
	if err := stream.SendMsg(&wire.MemberFrame{Flush: &wire.Flush{Revision: head, Full: full}}); err != nil {
		return rev, err
	}
	return head, nil
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// Trim is the AgentCard cache's transform in a member-only process: it keeps what Exported reads
// (the export label, the Verified condition without its message, the card, the signer's SPIFFE ID
// and what identifies the object) and drops the rest, which no one in that process reads. The
// agentcard controller keeps its own, full view.
func Trim(o any) (any, error) {
	c, ok := o.(*v1alpha1.AgentCard)
	if !ok {
		return o, nil
	}
	t := &v1alpha1.AgentCard{TypeMeta: c.TypeMeta}
	t.Name, t.Namespace, t.UID, t.ResourceVersion, t.Generation = c.Name, c.Namespace, c.UID, c.ResourceVersion, c.Generation
	t.DeletionTimestamp = c.DeletionTimestamp
	if v, ok := c.Labels[v1alpha1.LabelExport]; ok {
		t.Labels = map[string]string{v1alpha1.LabelExport: v}
	}
	if v := meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ConditionVerified); v != nil {
		t.Status.Conditions = []metav1.Condition{{Type: v.Type, Status: v.Status, ObservedGeneration: v.ObservedGeneration,
			LastTransitionTime: v.LastTransitionTime, Reason: v.Reason}}
	}
	t.Status.Card = c.Status.Card
	if c.Status.Signature != nil {
		t.Status.Signature = &v1alpha1.SignatureStatus{SpiffeID: c.Status.Signature.SpiffeID}
	}
	return t, nil
}
