package controller_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kagenti/platform/agentcard/api/v1alpha1"
	"github.com/kagenti/platform/agentcard/internal/fetch"
	"github.com/kagenti/platform/agentcard/internal/testcards"
)

// switchingServer serves one body until told to serve another.
func switchingServer(t *testing.T, ip string, first []byte) *atomic.Pointer[[]byte] {
	t.Helper()
	var body atomic.Pointer[[]byte]
	body.Store(&first)
	serveOn(t, ip, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write(*body.Load())
	}))
	return &body
}

func podLabel(t *testing.T, ns, name string) string {
	t.Helper()
	var p corev1.Pod
	require.NoError(t, k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &p))
	v, ok := p.Labels[v1alpha1.LabelSignatureVerified]
	if !ok {
		return "<unset>"
	}
	return v
}

// waitVerifiedPod waits until the card is Ready, verified and bound and its pod labelled true.
func waitVerifiedPod(t *testing.T, ns, card, pod string) {
	t.Helper()
	eventually(t, 30*time.Second, func() string {
		c := getCard(t, ns, card)
		if cond(c, "Ready") != "True/CardAvailable" || cond(c, "Bound") != "True/Bound" {
			return fmt.Sprintf("Ready=%s Bound=%s", cond(c, "Ready"), cond(c, "Bound"))
		}
		if l := podLabel(t, ns, pod); l != "true" {
			return "label " + l
		}
		return ""
	})
}

// A pod that served a valid signed card and then serves an unsigned card too large for the status
// (every '<' becomes 6 bytes once JSON-encoded): the old verdict must not stay in force. The pod is
// labelled false, the card is reported too large and the status no longer says verified.
func TestOversizedCardDoesNotLeaveTheOldVerdict(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	labels := map[string]string{"app": "stale"}
	body := switchingServer(t, "127.44.1.1", signedCard(t, ca, "spiffe://cluster.local/ns/"+ns+"/sa/stale", "1.0.0"))
	makePod(t, ns, "stale", "127.44.1.1", "stale", labels)
	require.NoError(t, k8s.Create(ctx, selectorCard(ns, "stale", labels)))
	waitVerifiedPod(t, ns, "stale", "stale")

	huge := hugeCard(t, fetch.MaxBodyBytes-1024)
	body.Store(&huge)
	eventually(t, 60*time.Second, func() string {
		c := getCard(t, ns, "stale")
		l := podLabel(t, ns, "stale")
		if l != "false" || cond(c, "Ready") != "False/CardTooLarge" || cond(c, "Synced") != "False/CardTooLarge" {
			return fmt.Sprintf("label=%s Ready=%s Synced=%s", l, cond(c, "Ready"), cond(c, "Synced"))
		}
		return ""
	})
	c := getCard(t, ns, "stale")
	assert.Equal(t, "False/CardTooLarge", cond(c, "Verified"))
	assert.Nil(t, c.Status.Card, "no card is shown when no pod serves one that fits")
	e := entry(c, "stale")
	require.NotNil(t, e)
	assert.Equal(t, v1alpha1.FetchFailed, e.FetchStatus)
	assert.Contains(t, e.Error, "JSON-encoded")
}

// hugeCard is a valid unsigned card of about size bytes, mostly '<'.
func hugeCard(t *testing.T, size int) []byte {
	t.Helper()
	small := testcards.Weather("2.0.0")
	desc := strings.Repeat("<", size-len(small))
	return []byte(strings.Replace(string(small), `"Weather forecasts and climate data"`, `"`+desc+`"`, 1))
}

// A status write the API server rejects (here: an admission policy, as a cluster admin might
// have) must not leave a positive verdict in force: the pod loses true before the write, and
// the rejected status is replaced by a small one saying Verified=False, reason StatusWriteFailed.
func TestRejectedStatusWriteFailsClosed(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "reject-version-" + ns},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}},
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
					Rule: admissionregistrationv1.Rule{APIGroups: []string{"kagenti.io"}, APIVersions: []string{"v1alpha1"},
						Resources: []string{"agentcards/status"}},
				}}},
			},
			Validations: []admissionregistrationv1.Validation{{
				Expression: `!has(object.status.card) || !has(object.status.card.version) || object.status.card.version != "rejected"`,
				Message:    "this cluster does not accept cards of version rejected",
			}},
		},
	}
	require.NoError(t, k8s.Create(ctx, policy))
	t.Cleanup(func() { _ = k8s.Delete(ctx, policy) })
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: policy.Name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: policy.Name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}},
	}
	require.NoError(t, k8s.Create(ctx, binding))
	t.Cleanup(func() { _ = k8s.Delete(ctx, binding) })

	labels := map[string]string{"app": "rejected"}
	body := switchingServer(t, "127.44.2.1", signedCard(t, ca, "spiffe://cluster.local/ns/"+ns+"/sa/rejected", "1.0.0"))
	makePod(t, ns, "rejected", "127.44.2.1", "rejected", labels)
	require.NoError(t, k8s.Create(ctx, selectorCard(ns, "rejected", labels)))
	waitVerifiedPod(t, ns, "rejected", "rejected")

	unsigned := testcards.Weather("rejected")
	body.Store(&unsigned)
	eventually(t, 30*time.Second, func() string {
		c := getCard(t, ns, "rejected")
		l := podLabel(t, ns, "rejected")
		// The new card has nothing to verify: the pod loses its label (before the refused write).
		if l != "<unset>" || cond(c, "Verified") != "False/StatusWriteFailed" {
			return fmt.Sprintf("label=%s Verified=%s Ready=%s", l, cond(c, "Verified"), cond(c, "Ready"))
		}
		return ""
	})
	c := getCard(t, ns, "rejected")
	assert.Equal(t, "False/StatusWriteFailed", cond(c, "Ready"))
	assert.Contains(t, meta.FindStatusCondition(c.Status.Conditions, "Verified").Message, "does not accept cards of version rejected")
	assert.Nil(t, c.Status.Card, "the rejected card is not shown")
	assert.Nil(t, c.Status.Signature, "the old signature result is not left behind")
	assert.Equal(t, v1alpha1.PhaseError, c.Status.Phase)
	assertVerdict(t, ns, "rejected", kstatus.InProgressStatus, "Progressing", "status write refused, retried")
}

// The label is agentcard's verdict: a pod carrying kagenti.io/signature-verified=true that no
// AgentCard verified loses it: set to false when no card selects it (with a Warning Event), and
// to the value its card calls for when it has one (none for a card with nothing to verify).
func TestUnverifiedTrueLabelIsReset(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	makePod(t, ns, "nocard", "127.44.3.1", "nocard", map[string]string{"app": "nocard"})
	forge := fmt.Sprintf(`{"metadata":{"labels":{%q:"true"}}}`, v1alpha1.LabelSignatureVerified)
	require.NoError(t, k8s.Patch(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nocard"}}, client.RawPatch(types.MergePatchType, []byte(forge))))
	eventually(t, 20*time.Second, func() string {
		if l := podLabel(t, ns, "nocard"); l != "false" {
			return "label " + l
		}
		return ""
	})

	// A pod whose card has nothing to verify (unsigned, no signature required), labelled true by
	// someone: the guard sets false, the next sync removes it.
	labels := map[string]string{"app": "unsigned"}
	serveCard(t, "127.44.3.2", testcards.Weather("1"))
	makePod(t, ns, "unsigned", "127.44.3.2", "unsigned", labels)
	require.NoError(t, k8s.Create(ctx, selectorCard(ns, "unsigned", labels)))
	eventually(t, 20*time.Second, func() string {
		if c := getCard(t, ns, "unsigned"); cond(c, "SignatureVerified") != "False/NoSignature" {
			return "SignatureVerified=" + cond(c, "SignatureVerified")
		}
		return ""
	})
	require.NoError(t, k8s.Patch(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "unsigned"}}, client.RawPatch(types.MergePatchType, []byte(forge))))
	sawFalse := false
	eventually(t, 20*time.Second, func() string {
		l := podLabel(t, ns, "unsigned")
		sawFalse = sawFalse || l == "false"
		if l != "<unset>" {
			return "label " + l
		}
		return ""
	})
	t.Logf("forged true on a pod with nothing to verify: reset to false seen: %v, then removed", sawFalse)

	// A verified pod keeps its label, and loses it when its AgentCard goes away.
	id := "spiffe://cluster.local/ns/" + ns + "/sa/signed"
	serveCard(t, "127.44.3.3", signedCard(t, ca, id, "1"))
	makePod(t, ns, "signed", "127.44.3.3", "signed", map[string]string{"app": "signed"})
	require.NoError(t, k8s.Create(ctx, selectorCard(ns, "signed", map[string]string{"app": "signed"})))
	waitVerifiedPod(t, ns, "signed", "signed")
	require.NoError(t, k8s.Delete(ctx, &v1alpha1.AgentCard{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "signed"}}))
	eventually(t, 20*time.Second, func() string {
		if l := podLabel(t, ns, "signed"); l != "false" {
			return "label " + l
		}
		return ""
	})
}

// The label follows the pod's card: true while its signature verifies, removed when the card turns
// unsigned (nothing to verify), false when a signature does not verify or binds another identity,
// removed again when the card has nothing to verify, false when a verified card is tampered with.
func TestVerifiedLabelFollowsTheCard(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	labels := map[string]string{"app": "follows"}
	own := signedCard(t, ca, "spiffe://cluster.local/ns/"+ns+"/sa/follows", "1.0.0")
	body := switchingServer(t, "127.44.4.1", own)
	makePod(t, ns, "follows", "127.44.4.1", "follows", labels)
	require.NoError(t, k8s.Create(ctx, selectorCard(ns, "follows", labels)))
	waitVerifiedPod(t, ns, "follows", "follows")

	unsigned := testcards.Weather("2.0.0")
	other := signedCard(t, ca, "spiffe://cluster.local/ns/"+ns+"/sa/someone-else", "3.0.0")
	tampered := tamper(t, own)
	for _, step := range []struct {
		serve       []byte
		label       string
		verifiedWhy string
	}{
		{unsigned, "<unset>", "False/NoSignature"},
		{other, "false", "False/IdentityMismatch"},
		{unsigned, "<unset>", "False/NoSignature"},
		{own, "true", "True/Verified"},
		{tampered, "false", "False/InvalidSignature"},
	} {
		body.Store(&step.serve)
		eventually(t, 30*time.Second, func() string {
			c := getCard(t, ns, "follows")
			if l := podLabel(t, ns, "follows"); l != step.label || cond(c, "Verified") != step.verifiedWhy {
				return fmt.Sprintf("want label %s and Verified=%s; got label %s, Verified=%s", step.label, step.verifiedWhy, l, cond(c, "Verified"))
			}
			return ""
		})
	}
}
