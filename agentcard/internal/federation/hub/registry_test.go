package hub_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kagenti/platform/agentcard/api/v1alpha1"
	"github.com/kagenti/platform/agentcard/internal/federation/fedtest"
	"github.com/kagenti/platform/agentcard/internal/federation/hub"
)

func TestTwoRegistrationsOfOneTrustDomainTheOlderKeepsIt(t *testing.T) {
	d := fedtest.NewDomain(t, "a.example")
	older, newer := fedtest.Registration("a", d, time.Minute, time.Hour), fedtest.Registration("impostor", d, time.Minute, time.Hour)
	older.CreationTimestamp = metav1.NewTime(time.Now().Add(-time.Hour))
	newer.CreationTimestamp = metav1.NewTime(time.Now())
	g := hub.NewRegistry()
	g.Replace([]v1alpha1.FederatedCluster{newer, older})
	r, ok := g.ByTrustDomain(d.TD)
	require.True(t, ok)
	require.Equal(t, "a", r.Name)
	imp, _ := g.Get("impostor")
	require.Equal(t, hub.ReasonDuplicateTrustDomain, imp.Reason)
	require.Contains(t, imp.Message, "FederatedCluster a")
}

func TestInvalidTrustBundleMakesTheRegistrationUnusable(t *testing.T) {
	d := fedtest.NewDomain(t, "a.example")
	fc := fedtest.Registration("a", d, time.Minute, time.Hour)
	fc.Spec.TrustBundle = "not a bundle"
	r := hub.RegistrationFrom(&fc)
	require.Equal(t, hub.ReasonInvalidTrustBundle, r.Reason)
	require.Contains(t, r.Message, "spec.trustBundle")
	g := hub.NewRegistry()
	g.Replace([]v1alpha1.FederatedCluster{fc})
	_, err := g.GetX509BundleForTrustDomain(d.TD)
	require.Error(t, err, "an unusable registration authenticates no member")
}

func TestStatusNamesEachStateOfAMember(t *testing.T) {
	d := fedtest.NewDomain(t, "a.example")
	fc := fedtest.Registration("a", d, 30*time.Second, 5*time.Minute)
	reg := hub.RegistrationFrom(&fc)
	reason := func(st v1alpha1.FederatedClusterStatus, typ string) string {
		c := st.Condition(typ)
		require.NotNil(t, c, typ)
		return c.Reason
	}
	st := hub.RenderStatus(reg, hub.MemberStatus{})
	require.Equal(t, v1alpha1.ReasonNeverSeen, reason(st, v1alpha1.ConditionFederatedReady))
	require.Equal(t, v1alpha1.ReasonNeverSeen, reason(st, v1alpha1.ConditionConnected))

	st = hub.RenderStatus(reg, hub.MemberStatus{Known: true, Connected: true, Cards: 3, ConnReason: v1alpha1.ReasonStreamOpen, LastSeen: time.Now()})
	require.Equal(t, v1alpha1.ReasonCardsServed, reason(st, v1alpha1.ConditionFederatedReady))
	require.Equal(t, metav1.ConditionTrue, st.Condition(v1alpha1.ConditionFederatedReady).Status)
	require.EqualValues(t, 3, st.Cards)
	require.NotNil(t, st.LastSeen)

	st = hub.RenderStatus(reg, hub.MemberStatus{Known: true, Stale: true, Cards: 3, ConnReason: v1alpha1.ReasonDisconnected})
	require.Equal(t, v1alpha1.ReasonStale, reason(st, v1alpha1.ConditionFederatedReady))
	require.EqualValues(t, 3, st.StaleCards)

	st = hub.RenderStatus(reg, hub.MemberStatus{Known: true, Withdrawn: true, ConnReason: v1alpha1.ReasonDisconnected})
	require.Equal(t, v1alpha1.ReasonWithdrawn, reason(st, v1alpha1.ConditionFederatedReady))

	st = hub.RenderStatus(reg, hub.MemberStatus{Known: true, ConnReason: v1alpha1.ReasonCertificateExpired, ConnMessage: "expired"})
	require.Equal(t, v1alpha1.ReasonCertificateExpired, reason(st, v1alpha1.ConditionConnected))
	require.Equal(t, v1alpha1.ReasonCertificateExpired, reason(st, v1alpha1.ConditionFederatedReady))

	st = hub.RenderStatus(reg, hub.MemberStatus{Known: true, Connected: true, Cards: 1, Refused: 1,
		Refusals: []v1alpha1.FederationRefusal{{Namespace: "agents", Name: "forged", Reason: v1alpha1.ReasonSignerOutsideTrustDomain, Message: "m"}}})
	require.Equal(t, v1alpha1.ReasonCardRefused, reason(st, v1alpha1.ConditionCardsAccepted))
	require.Contains(t, st.Condition(v1alpha1.ConditionCardsAccepted).Message, "agents/forged: SignerOutsideTrustDomain")

	bad := reg
	bad.Reason, bad.Message = hub.ReasonInvalidTrustBundle, "spec.trustBundle: x"
	st = hub.RenderStatus(bad, hub.MemberStatus{})
	require.Equal(t, hub.ReasonInvalidTrustBundle, reason(st, v1alpha1.ConditionFederatedReady))
}

func TestCardsBeyondMaxCardsAreRefused(t *testing.T) {
	w := newWorld(t)
	fc := fedtest.Registration("a", w.a, 30*time.Second, 5*time.Minute)
	fc.Spec.MaxCards = new(int32)
	*fc.Spec.MaxCards = 1
	w.hub.Registry.Replace([]v1alpha1.FederatedCluster{fc})
	a := w.member(t, "a", w.a)
	a.Run(t)
	c1, id1 := w.a.SignedCard(t, "agents", "one", "One", "1.0.0")
	c2, id2 := w.a.SignedCard(t, "agents", "two", "Two", "1.0.0")
	a.Log.Put("agents", "one", c1, id1, time.Now())
	a.Log.Put("agents", "two", c2, id2, time.Now())
	fedtest.Eventually(t, "the second refused", func() bool { return w.refusal("a", "agents", "two") != nil })
	require.Equal(t, v1alpha1.ReasonTooManyCards, w.refusal("a", "agents", "two").Reason)
	require.True(t, w.served("a", "agents", "one"))
}
