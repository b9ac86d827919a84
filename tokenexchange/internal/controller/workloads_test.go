package controller_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/kagenti/platform/pkg/duck"
	"github.com/kagenti/platform/pkg/duck/ducktest"
	"github.com/kagenti/platform/tokenexchange/api/v1alpha1"
	"github.com/kagenti/platform/tokenexchange/internal/controller"
)

// TestWorkloadKindsWatchedOnceTargeted: a built-in workload kind is watched (an informer caching
// every object of that kind in the cluster: ReplicaSets, Jobs) only once a TokenExchange targets
// it, and a target of that kind created afterwards still reaches its TokenExchange.
func TestWorkloadKindsWatchedOnceTargeted(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	opts := cache.Options{DefaultTransform: cache.TransformStripManagedFields(), ByObject: controller.CacheByObject(),
		DefaultNamespaces: map[string]cache.Config{ns: {}}}
	watched := ducktest.RecordInformers(&opts, scheme, duck.BuiltinKinds())
	// A second instance beside the suite's (its controller name is taken): the suite's reconciles
	// the same objects to the same result; this one's informers are what the test counts.
	mgr, err := ctrl.NewManager(testCfg, ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"},
		Cache: opts, Controller: config.Controller{SkipNameValidation: ptr.To(true)}})
	require.NoError(t, err)
	require.NoError(t, controller.Setup(mgr, controller.Options{}))
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	t.Cleanup(func() { cancel(); <-done })
	require.True(t, mgr.GetCache().WaitForCacheSync(mctx))
	assert.Empty(t, watched(), "no TokenExchange targets a workload yet")

	must(t, k8s.Create(ctx, &v1alpha1.TokenExchange{ObjectMeta: metav1.ObjectMeta{Name: "db-tx", Namespace: ns},
		Spec: v1alpha1.TokenExchangeSpec{TargetRef: duck.TargetRef{Kind: "StatefulSet", Name: "db"}}}))
	eventually(t, "the StatefulSet watch", func(context.Context) (bool, string) {
		kinds := watched()
		return slices.Equal(kinds, []string{"StatefulSet"}), fmt.Sprintf("watched %v", kinds)
	})
	waitCondition(t, ns, "db-tx", v1alpha1.ConditionTargetResolved, metav1.ConditionFalse, duck.ReasonTargetNotFound)
	d := deployment(ns, "db", 1, true)
	must(t, k8s.Create(ctx, &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns},
		Spec: appsv1.StatefulSetSpec{Selector: d.Spec.Selector, Template: d.Spec.Template}}))
	waitCondition(t, ns, "db-tx", v1alpha1.ConditionConfigMapReady, metav1.ConditionTrue, v1alpha1.ReasonConfigured)
	assert.Equal(t, []string{"StatefulSet"}, watched(), "only the kind targeted")
}
