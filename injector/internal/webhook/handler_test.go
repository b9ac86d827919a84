package webhook_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/kagenti/platform/injector/internal/config"
	"github.com/kagenti/platform/injector/internal/inject"
	injectorwebhook "github.com/kagenti/platform/injector/internal/webhook"
)

func newHandler() *injectorwebhook.Handler {
	cfg := config.Default()
	return &injectorwebhook.Handler{
		Config:             func() *config.Config { return cfg },
		ExcludedNamespaces: []string{"kube-system", "kagenti-system"},
		Metrics:            injectorwebhook.NewMetrics(nil),
	}
}

func deployment(ns string, containers, envPerContainer int) *appsv1.Deployment {
	d := &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: ns, Labels: map[string]string{inject.LabelInject: "enabled"}},
	}
	for i := range containers {
		c := corev1.Container{Name: fmt.Sprintf("c%d", i), Image: "example.com/app:1"}
		for j := range envPerContainer {
			c.Env = append(c.Env, corev1.EnvVar{Name: fmt.Sprintf("VAR_%d", j), Value: "value"})
		}
		d.Spec.Template.Spec.Containers = append(d.Spec.Template.Spec.Containers, c)
	}
	d.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationUpdate}}
	return d
}

func review(t testing.TB, op admissionv1.Operation, gvk metav1.GroupVersionKind, obj runtime.Object) []byte {
	raw, err := json.Marshal(obj)
	require.NoError(t, err)
	ar := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID: types.UID("1"), Kind: gvk, Operation: op, Namespace: "agents",
			Object: runtime.RawExtension{Raw: raw},
		},
	}
	b, err := json.Marshal(ar)
	require.NoError(t, err)
	return b
}

// post sends body to the webhook's HTTP handler and returns the HTTP status and the response.
func post(t testing.TB, h http.Handler, body []byte) (int, *admissionv1.AdmissionResponse) {
	req := httptest.NewRequest(http.MethodPost, injectorwebhook.Path, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	var ar admissionv1.AdmissionReview
	if err := json.Unmarshal(rec.Body.Bytes(), &ar); err != nil || ar.Response == nil {
		return rec.Code, nil
	}
	return rec.Code, ar.Response
}

var deploymentGVK = metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}

func TestHandlerPatchNeverTouchesManagedFields(t *testing.T) {
	_, resp := post(t, injectorwebhook.HTTPHandler(newHandler()), review(t, admissionv1.Create, deploymentGVK, deployment("agents", 1, 0)))
	require.NotNil(t, resp)
	require.True(t, resp.Allowed)
	require.NotEmpty(t, resp.Patch)
	require.NotContains(t, string(resp.Patch), "managedFields")
	for _, op := range decodePatch(t, resp.Patch) {
		require.True(t, strings.HasPrefix(op["path"].(string), "/spec/template/"), "unexpected patch path %v", op["path"])
	}
}

// The API server applies the patch to the object exactly as it sent it, which need not be the typed
// encoding of it (an API server of another version): the patch is a diff from the request's bytes.
func TestHandlerPatchAppliesToTheRequestObject(t *testing.T) {
	// The typed encoding of this init container has "resources": {}; the request's has none. The
	// injected init containers go first, so the patch rewrites the one at index 0 field by field.
	obj := map[string]any{"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]any{"name": "agent", "labels": map[string]any{inject.LabelInject: "enabled"}},
		"spec": map[string]any{"template": map[string]any{"spec": map[string]any{
			"initContainers": []any{map[string]any{"name": "setup", "image": "busybox:1.37"}},
			"containers":     []any{map[string]any{"name": "agent", "image": "example.com/agent:1"}},
		}}}}
	_, resp := post(t, injectorwebhook.HTTPHandler(newHandler()), reviewOf(t, obj))
	require.NotNil(t, resp)
	require.True(t, resp.Allowed)
	patch, err := jsonpatch.DecodePatch(resp.Patch)
	require.NoError(t, err)
	patched, err := patch.Apply(mustJSON(t, obj))
	require.NoError(t, err, "the patch must apply to the object as sent")
	var d appsv1.Deployment
	require.NoError(t, json.Unmarshal(patched, &d))
	require.Equal(t, []string{config.ProxyInit, config.Authbridge, "setup"}, containerNames(d.Spec.Template.Spec.InitContainers))
	require.Equal(t, "busybox:1.37", d.Spec.Template.Spec.InitContainers[2].Image)
}

func decodePatch(t testing.TB, b []byte) []map[string]any {
	var ops []map[string]any
	require.NoError(t, json.Unmarshal(b, &ops))
	return ops
}

func TestHandlerBadInput(t *testing.T) {
	h := injectorwebhook.HTTPHandler(newHandler())
	secret := metav1.GroupVersionKind{Version: "v1", Kind: "Secret"}
	for name, tc := range map[string]struct {
		body     []byte
		wantCode int32
		wantMsg  string
	}{
		"not json":     {[]byte("{{{"), http.StatusBadRequest, ""},
		"empty review": {[]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`), http.StatusBadRequest, ""},
		"wrong kind":   {review(t, admissionv1.Create, secret, &corev1.Secret{}), http.StatusBadRequest, "not Secret"},
		"containers not a list": {reviewOf(t, map[string]any{"apiVersion": "apps/v1", "kind": "Deployment",
			"metadata": map[string]any{"name": "x", "labels": map[string]any{inject.LabelInject: "enabled"}},
			"spec":     map[string]any{"template": map[string]any{"spec": map[string]any{"containers": "agent"}}}}), http.StatusBadRequest, "reading pod template of Deployment"},
		"no pod template": {mustJSON(t, map[string]any{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": map[string]any{
			"uid": "1", "kind": deploymentGVK, "operation": "CREATE", "namespace": "agents",
			"object": map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": map[string]any{"name": "x", "labels": map[string]any{inject.LabelInject: "enabled"}}},
		}}), http.StatusBadRequest, "has no pod template"},
		"bad inject label": {review(t, admissionv1.Create, deploymentGVK, func() runtime.Object {
			d := deployment("agents", 1, 0)
			d.Labels[inject.LabelInject] = "yes"
			return d
		}()), http.StatusForbidden, "kagenti.io/inject: invalid value \"yes\": accepted values: enabled, disabled"},
		// The field is named from the object's root, as kubectl shows the manifest.
		"agent runs as the proxy UID": {review(t, admissionv1.Create, deploymentGVK, func() runtime.Object {
			d := deployment("agents", 2, 0)
			d.Spec.Template.Spec.Containers[1].SecurityContext = &corev1.SecurityContext{RunAsUser: ptr.To[int64](1337)}
			return d
		}()), http.StatusForbidden, `spec.template.spec.containers[1].securityContext.runAsUser: invalid value 1337: container "c1" would run as the proxy UID`},
		"bad interception label": {review(t, admissionv1.Create, deploymentGVK, func() runtime.Object {
			d := deployment("agents", 1, 0)
			d.Labels[inject.LabelInterception] = "explicit"
			return d
		}()), http.StatusForbidden, `kagenti.io/interception: invalid value "explicit": accepted values: transparent`},
		// Proxy mode would set HTTP_PROXY: a container's own is refused, named from the root.
		"agent sets its own proxy in proxy mode": {review(t, admissionv1.Create, deploymentGVK, func() runtime.Object {
			d := deployment("agents", 2, 0)
			d.Labels[inject.LabelInterception] = "proxy"
			d.Spec.Template.Spec.Containers[1].Env = []corev1.EnvVar{{Name: "HTTPS_PROXY", Value: "http://corp-proxy:3128"}}
			return d
		}()), http.StatusForbidden, `spec.template.spec.containers[1].env[0] ("c1"): HTTPS_PROXY is set by the injector in proxy mode`},
	} {
		t.Run(name, func(t *testing.T) {
			code, resp := post(t, h, tc.body)
			require.Equal(t, http.StatusOK, code, "admission errors travel in the AdmissionReview")
			require.NotNil(t, resp)
			require.False(t, resp.Allowed)
			require.Equal(t, tc.wantCode, resp.Result.Code, resp.Result.Message)
			require.Contains(t, resp.Result.Message, tc.wantMsg)
		})
	}
}

func TestHandlerHugeTemplate(t *testing.T) {
	h := injectorwebhook.HTTPHandler(newHandler())
	// ~3 MiB: injected normally.
	code, resp := post(t, h, review(t, admissionv1.Create, deploymentGVK, deployment("agents", 100, 1000)))
	require.Equal(t, http.StatusOK, code)
	require.True(t, resp.Allowed)
	require.NotEmpty(t, resp.Patch)
	// Beyond the 7 MiB request limit of controller-runtime: a clear 400, no panic.
	code, resp = post(t, h, review(t, admissionv1.Create, deploymentGVK, deployment("agents", 200, 2000)))
	require.Equal(t, http.StatusOK, code)
	require.False(t, resp.Allowed)
	require.Equal(t, int32(http.StatusRequestEntityTooLarge), resp.Result.Code)
}

func TestHandlerSkips(t *testing.T) {
	h := injectorwebhook.HTTPHandler(newHandler())
	unlabelled := deployment("agents", 1, 0)
	unlabelled.Labels = nil
	_, resp := post(t, h, review(t, admissionv1.Create, deploymentGVK, unlabelled))
	require.True(t, resp.Allowed)
	require.Empty(t, resp.Patch)

	body := review(t, admissionv1.Create, deploymentGVK, deployment("kagenti-system", 1, 0))
	body = bytes.Replace(body, []byte(`"namespace":"agents"`), []byte(`"namespace":"kagenti-system"`), 1)
	_, resp = post(t, h, body)
	require.True(t, resp.Allowed)
	require.Empty(t, resp.Patch, "never acts in its own namespace")
}

func reviewOf(t testing.TB, obj map[string]any) []byte {
	return mustJSON(t, map[string]any{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": map[string]any{
		"uid": "1", "kind": deploymentGVK, "operation": "CREATE", "namespace": "agents", "object": obj}})
}

func mustJSON(t testing.TB, v any) []byte {
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}

// FuzzHandler feeds arbitrary bodies to the webhook: it must always answer, never panic (the
// handler runs without panic recovery here, so a panic fails the fuzz target).
func FuzzHandler(f *testing.F) {
	f.Add(review(f, admissionv1.Create, deploymentGVK, deployment("agents", 2, 3)))
	f.Add(review(f, admissionv1.Update, deploymentGVK, deployment("agents", 1, 1)))
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"1","kind":{"group":"batch","version":"v1","kind":"CronJob"},"operation":"CREATE","object":{"metadata":{"labels":{"kagenti.io/inject":"enabled"}},"spec":{"jobTemplate":{"spec":{"template":{"spec":{"containers":null}}}}}}}}`))
	f.Add([]byte(`{"request":{"kind":{"group":"apps","kind":"Deployment"},"operation":"CREATE","object":{"metadata":{"labels":{"kagenti.io/inject":"disabled"}},"spec":{"template":{"metadata":{"annotations":{"kagenti.io/injection-status":"{\"version\":\"v1\",\"containers\":[\"agent\"]}"}}}}}}}`))
	f.Add([]byte(`{"request":{"kind":{"group":"apps","kind":"Deployment"},"operation":"CREATE","object":{"metadata":{"labels":{"kagenti.io/inject":"enabled"},"annotations":{"kagenti.io/authbridge-cpu":"1e400"}},"spec":{"template":{}}}}}`))
	f.Add([]byte(`{"request":{"kind":{"group":"apps","kind":"Deployment"},"operation":"UPDATE","object":{"metadata":{"labels":{"kagenti.io/inject":"yes"}},"spec":{"template":{"spec":{"hostNetwork":true}}}},"oldObject":{"metadata":{"labels":{"kagenti.io/inject":"yes"}},"spec":{"template":{"spec":{"hostNetwork":true}}}}}}`))
	f.Add([]byte(`{"request":{"kind":{"group":"batch","kind":"CronJob"},"operation":"UPDATE","object":{"metadata":{"labels":{"kagenti.io/inject":"enabled"}},"spec":{"jobTemplate":{"spec":{"template":{"metadata":{"labels":{"kagenti.io/signature-verified":"true"}},"spec":{"containers":[{"name":"a","ports":[{"containerPort":8080}]}]}}}}}},"oldObject":"x"}}`))
	f.Add([]byte("null"))
	hook := injectorwebhook.HTTPHandler(newHandler())
	noRecover := false
	hook.RecoverPanic = &noRecover
	f.Fuzz(func(t *testing.T, body []byte) {
		code, _ := post(t, hook, body)
		if code != http.StatusOK {
			t.Fatalf("HTTP %d", code)
		}
	})
}

// The handler reads the template's hostname settings: a template that sets hostname (or
// setHostnameAsFQDN) gets POD_NAME projected into the identity volume, since its pods' hostname is
// not their name; one without gets none (kagenti-authbridge takes the hostname).
func TestHandlerProjectsPodNameOnlyForAnotherHostname(t *testing.T) {
	for name, tc := range map[string]struct {
		hostname string
		want     bool
	}{"no hostname": {"", false}, "hostname": {"weather", true}} {
		d := deployment("agents", 1, 0)
		d.Spec.Template.Spec.Hostname = tc.hostname
		_, resp := post(t, injectorwebhook.HTTPHandler(newHandler()), review(t, admissionv1.Create, deploymentGVK, d))
		require.NotNil(t, resp, name)
		require.True(t, resp.Allowed, name)
		patch, err := jsonpatch.DecodePatch(resp.Patch)
		require.NoError(t, err)
		patched, err := patch.Apply(mustJSON(t, d))
		require.NoError(t, err)
		var out appsv1.Deployment
		require.NoError(t, json.Unmarshal(patched, &out))
		var files []string
		for _, v := range out.Spec.Template.Spec.Volumes {
			if v.Name == inject.VolumeIdentity {
				require.NotNil(t, v.Projected, name)
				for _, item := range v.Projected.Sources[0].DownwardAPI.Items {
					files = append(files, item.Path)
				}
			}
		}
		require.NotEmpty(t, files, name)
		require.Equal(t, tc.want, slices.Contains(files, "POD_NAME"), "%s: %v", name, files)
	}
}
