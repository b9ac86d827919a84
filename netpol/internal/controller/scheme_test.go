package controller

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	"github.com/kagenti/platform/netpol/internal/view"
	"github.com/kagenti/platform/pkg/duck"
)

// TestSchemeHoldsWhatNetpolUses: the manager's scheme knows the typed kinds netpol caches, writes
// and names in Events (the built-in workload kinds included), and its AgentCard status, but not
// client-go's other built-in groups. The envtest suite runs every manager on this scheme.
func TestSchemeHoldsWhatNetpolUses(t *testing.T) {
	s, err := NewScheme()
	require.NoError(t, err)
	for _, obj := range []k8sruntime.Object{&networkingv1.NetworkPolicy{}, &networkingv1.NetworkPolicyList{}, &corev1.Event{}, &view.CardStatus{}} {
		_, _, err := s.ObjectKinds(obj)
		assert.NoError(t, err, "%T", obj)
	}
	for _, gvk := range duck.BuiltinKinds() {
		assert.True(t, s.Recognizes(gvk), "%s is cached typed", gvk.Kind)
	}
	assert.False(t, s.Recognizes(schema.GroupVersionKind{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "Role"}), "no group netpol does not read")
	assert.Less(t, len(s.AllKnownTypes()), len(clientgoscheme.Scheme.AllKnownTypes())/5)
}

// BenchmarkScheme reports the heap one copy of each scheme holds.
func BenchmarkScheme(b *testing.B) {
	for _, c := range []struct {
		name string
		make func() *k8sruntime.Scheme
	}{
		{"netpol", func() *k8sruntime.Scheme { s, _ := NewScheme(); return s }},
		{"client-go", func() *k8sruntime.Scheme {
			s := k8sruntime.NewScheme()
			_ = clientgoscheme.AddToScheme(s)
			_ = view.AddToScheme(s)
			return s
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			var before, after runtime.MemStats
			keep := make([]*k8sruntime.Scheme, 0, b.N)
			runtime.GC()
			runtime.ReadMemStats(&before)
			for b.Loop() {
				keep = append(keep, c.make())
			}
			runtime.GC()
			runtime.ReadMemStats(&after)
			b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(len(keep)), "live-B/scheme")
			runtime.KeepAlive(keep)
		})
	}
}
