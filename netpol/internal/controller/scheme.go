package controller

import (
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kagenti/platform/netpol/internal/view"
)

// NewScheme is the scheme of netpol's manager: the typed kinds it caches, writes or names in
// Events (core/v1, NetworkPolicies, the built-in workload kinds of apps/v1 and batch/v1, cached
// typed by kit.TrimmedWorkloads) and the AgentCard status it applies. AgentCards are read
// unstructured and need no types; leader election, Events and metrics authentication use
// client-go's typed clients with their own scheme. client-go's whole scheme (every built-in group,
// about 2 MB of type tables per copy) is not registered again here.
func NewScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, appsv1.AddToScheme, batchv1.AddToScheme, networkingv1.AddToScheme, view.AddToScheme} {
		if err := add(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}
