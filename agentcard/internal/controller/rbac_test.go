package controller_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/kagenti/platform/agentcard/internal/devca"
	"github.com/kagenti/platform/agentcard/internal/verify"
)

const agentcardSA = "system:serviceaccount:kagenti-system:kagenti-agentcard"

// applyShippedRBAC creates the ClusterRole/Role generated from the markers and the kustomize
// base's ServiceAccount and bindings, as installed.
func applyShippedRBAC(t *testing.T) {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "../../..")
	for _, f := range []string{"deploy/rbac/agentcard/role.yaml", "deploy/kustomize/agentcard/serviceaccount.yaml"} {
		raw, err := os.ReadFile(filepath.Join(root, f))
		require.NoError(t, err)
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
		for {
			u := &unstructured.Unstructured{}
			if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
				break
			} else {
				require.NoError(t, err, f)
			}
			if len(u.Object) == 0 {
				continue
			}
			if err := k8s.Create(context.Background(), u); err != nil && !apierrors.IsAlreadyExists(err) {
				require.NoError(t, err, "%s: %s %s", f, u.GetKind(), u.GetName())
			}
		}
	}
}

func impersonate(t *testing.T, user string) kubernetes.Interface {
	t.Helper()
	cfg := rest.CopyConfig(restCfg)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	return kubernetes.NewForConfigOrDie(cfg)
}

// agentcard reads the trust bundle ConfigMap and no other: with only the shipped RBAC, its
// service account can list and watch that one ConfigMap (by name, as the bundle watcher does) and
// gets Forbidden for any other ConfigMap, in its namespace or elsewhere.
func TestRBACReadsOnlyTheTrustBundle(t *testing.T) {
	applyShippedRBAC(t)
	ctx := context.Background()
	other := newNamespace(t)
	require.NoError(t, k8s.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: bundleNS, Name: "not-the-bundle"}}))
	t.Cleanup(func() {
		_ = k8s.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: bundleNS, Name: "not-the-bundle"}})
	})
	sa := impersonate(t, agentcardSA)
	byName := metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", bundleName).String()}

	list, err := sa.CoreV1().ConfigMaps(bundleNS).List(ctx, byName)
	require.NoError(t, err, "listing the bundle by name")
	assert.Len(t, list.Items, 1)
	byName.ResourceVersion = list.ResourceVersion
	w, err := sa.CoreV1().ConfigMaps(bundleNS).Watch(ctx, byName)
	require.NoError(t, err, "watching the bundle by name")
	w.Stop()

	_, err = sa.CoreV1().ConfigMaps(bundleNS).Get(ctx, "not-the-bundle", metav1.GetOptions{})
	assert.True(t, apierrors.IsForbidden(err), "another ConfigMap of %s: %v", bundleNS, err)
	_, err = sa.CoreV1().ConfigMaps(bundleNS).List(ctx, metav1.ListOptions{})
	assert.True(t, apierrors.IsForbidden(err), "every ConfigMap of %s: %v", bundleNS, err)
	_, err = sa.CoreV1().ConfigMaps(other).List(ctx, metav1.ListOptions{})
	assert.True(t, apierrors.IsForbidden(err), "ConfigMaps of %s: %v", other, err)
	_, err = sa.CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{})
	assert.True(t, apierrors.IsForbidden(err), "ConfigMaps cluster-wide: %v", err)

	// What the controller needs otherwise is still there: its pod informers list and watch, the
	// label is a merge patch. It never reads one pod by name (TestMain fails the suite if the
	// controller GETs a pod), so the role grants no get.
	pods, err := sa.CoreV1().Pods(other).List(ctx, metav1.ListOptions{})
	assert.NoError(t, err)
	w, err = sa.CoreV1().Pods(other).Watch(ctx, metav1.ListOptions{ResourceVersion: pods.ResourceVersion})
	require.NoError(t, err, "watching pods")
	w.Stop()
	makePod(t, other, "labelled", "127.44.9.1", "labelled", map[string]string{"app": "labelled"})
	_, err = sa.CoreV1().Pods(other).Patch(ctx, "labelled", types.MergePatchType, []byte(`{"metadata":{"labels":{"kagenti.io/signature-verified":null}}}`), metav1.PatchOptions{})
	assert.NoError(t, err, "patching a pod's label")
	_, err = sa.CoreV1().Pods(other).Get(ctx, "labelled", metav1.GetOptions{})
	assert.True(t, apierrors.IsForbidden(err), "getting a pod by name (the controller never does): %v", err)

	// The bundle watcher, running as the service account, loads the bundle and follows a rotation.
	cfg := rest.CopyConfig(restCfg)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: agentcardSA}
	store := &verify.TrustStore{}
	rotations := make(chan event.TypedGenericEvent[client.Object])
	bw, err := verify.NewBundleWatcher(cfg, k8s, types.NamespacedName{Namespace: bundleNS, Name: bundleName}, "bundle.crt", "cluster.local", store, rotations)
	require.NoError(t, err)
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = bw.Start(wctx)
	}()
	go func() {
		for {
			select {
			case <-rotations:
			case <-done:
				return
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	eventually(t, 30*time.Second, func() string {
		if b, err := store.Get(); b == nil {
			return fmt.Sprintf("no bundle loaded as %s (%v)", agentcardSA, err)
		}
		return ""
	})
	first, _ := store.Get()
	ca2, err := devca.NewCA("cluster.local", time.Hour)
	require.NoError(t, err)
	var cm corev1.ConfigMap
	require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: bundleNS, Name: bundleName}, &cm))
	orig := cm.Data["bundle.crt"]
	cm.Data["bundle.crt"] = orig + string(devca.CertPEM(ca2.Cert))
	require.NoError(t, k8s.Update(ctx, &cm))
	t.Cleanup(func() {
		require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: bundleNS, Name: bundleName}, &cm))
		cm.Data["bundle.crt"] = orig
		_ = k8s.Update(ctx, &cm)
	})
	eventually(t, 30*time.Second, func() string {
		if b, _ := store.Get(); b == nil || b.Hash == first.Hash {
			return "rotation not seen"
		}
		return ""
	})
}
