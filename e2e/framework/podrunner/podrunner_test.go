package podrunner

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

func TestExpand(t *testing.T) {
	vars := map[string]string{"A": "x", "B": "y"}
	for in, want := range map[string]string{
		"$(A)-$(B)":    "x-y",
		"$(MISSING)":   "$(MISSING)",
		"$$(A)":        "$(A)",
		"cost $5":      "cost $5",
		"open $(A":     "open $(A",
		"trailing $":   "trailing $",
		"--port=$(B)1": "--port=y1",
	} {
		if got := expand(in, vars); got != want {
			t.Errorf("expand(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestImageName(t *testing.T) {
	for in, want := range map[string]string{
		"ghcr.io/kagenti/kagenti-authbridge:v0.1.0":      "kagenti-authbridge",
		"ghcr.io/spiffe/spiffe-helper:0.11.0":            "spiffe-helper",
		"localhost:5000/spiffe-helper":                   "spiffe-helper",
		"example.com/a/b@sha256:0123456789abcdef":        "b",
		"registry.k8s.io/e2e-test-images/busybox:1.36.1": "busybox",
	} {
		if got := imageName(in); got != want {
			t.Errorf("imageName(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestWriteAtomically: the layout the kubelet's atomic writer leaves (names → ..data/name,
// ..data → a timestamped directory), a swap on change, removal of names that are gone, modes.
func TestWriteAtomically(t *testing.T) {
	dir := t.TempDir()
	write := func(files map[string]projectedFile) {
		t.Helper()
		if err := writeAtomically(dir, files); err != nil {
			t.Fatal(err)
		}
	}
	write(map[string]projectedFile{"config.yaml": {data: []byte("a: 1\n"), mode: 0o644}, "sub/key": {data: []byte("k"), mode: 0o600}})
	first, _ := os.Readlink(filepath.Join(dir, "..data"))
	if link, _ := os.Readlink(filepath.Join(dir, "config.yaml")); link != filepath.Join("..data", "config.yaml") {
		t.Fatalf("config.yaml links to %q", link)
	}
	if info, err := os.Stat(filepath.Join(dir, "sub", "key")); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("sub/key: %v %v", info, err)
	}

	write(map[string]projectedFile{"config.yaml": {data: []byte("a: 1\n"), mode: 0o644}, "sub/key": {data: []byte("k"), mode: 0o600}})
	if again, _ := os.Readlink(filepath.Join(dir, "..data")); again != first {
		t.Fatalf("unchanged content swapped ..data: %s → %s", first, again)
	}

	write(map[string]projectedFile{"config.yaml": {data: []byte("a: 2\n"), mode: 0o644}})
	second, _ := os.Readlink(filepath.Join(dir, "..data"))
	if second == first {
		t.Fatal("changed content did not swap ..data")
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "config.yaml")); string(b) != "a: 2\n" {
		t.Fatalf("config.yaml = %q", b)
	}
	if _, err := os.Lstat(filepath.Join(dir, "sub")); !os.IsNotExist(err) {
		t.Fatalf("a name that is gone is still linked: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, first)); !os.IsNotExist(err) {
		t.Fatalf("the previous directory %s was not removed", first)
	}
}

func TestSelectKeys(t *testing.T) {
	data := map[string][]byte{"a": []byte("1"), "b": []byte("2")}
	files, err := selectKeys("configMap x", data, []corev1.KeyToPath{{Key: "a", Path: "dir/a.txt", Mode: ptr.To[int32](0o600)}}, nil, false)
	if err != nil || len(files) != 1 || files["dir/a.txt"].mode != 0o600 {
		t.Fatalf("items: %v %v", files, err)
	}
	if _, err := selectKeys("configMap x", data, []corev1.KeyToPath{{Key: "missing", Path: "m"}}, nil, false); err == nil {
		t.Fatal("a missing key of a required volume must fail")
	}
	if files, err := selectKeys("configMap x", data, []corev1.KeyToPath{{Key: "missing", Path: "m"}}, nil, true); err != nil || len(files) != 0 {
		t.Fatalf("optional volume, missing key: %v %v", files, err)
	}
}

func TestFieldAndResourceValues(t *testing.T) {
	pod := &corev1.Pod{}
	pod.Name, pod.Namespace = "p", "ns"
	pod.Annotations = map[string]string{"kagenti.io/identity-defaults": "A=1\n", "x": "y"}
	pod.Spec.Containers = []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
		Limits: corev1.ResourceList{"memory": resource.MustParse("64Mi"), "cpu": resource.MustParse("250m")}}}}
	for path, want := range map[string]string{
		"metadata.name": "p", "metadata.annotations['kagenti.io/identity-defaults']": "A=1\n",
		"metadata.annotations": "kagenti.io/identity-defaults=\"A=1\\n\"\nx=\"y\"",
	} {
		if got, err := fieldValue(pod, path); err != nil || got != want {
			t.Errorf("fieldValue(%s) = %q, %v; want %q", path, got, err, want)
		}
	}
	if _, err := fieldValue(pod, "spec.unknown"); err == nil {
		t.Error("an unknown fieldPath must fail")
	}
	mi := resource.MustParse("1Mi")
	if got, err := resourceValue(pod, "c", &corev1.ResourceFieldSelector{Resource: "limits.memory", Divisor: mi}); err != nil || got != "64" {
		t.Errorf("limits.memory in Mi = %q, %v", got, err)
	}
	if got, err := resourceValue(pod, "c", &corev1.ResourceFieldSelector{Resource: "limits.cpu"}); err != nil || got != "1" {
		t.Errorf("limits.cpu rounded up = %q, %v", got, err)
	}
	if _, err := resourceValue(pod, "c", &corev1.ResourceFieldSelector{Resource: "requests.memory"}); err == nil {
		t.Error("an unset request must fail (no node-allocatable fallback)")
	}
}

func TestUnsupportedSpecFailsNamingTheField(t *testing.T) {
	for field, c := range map[string]corev1.Container{
		"livenessProbe": {Name: "c", LivenessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}}},
		"startupProbe":  {Name: "c", StartupProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromString("status")}}}},
		"subPath":       {Name: "c", VolumeMounts: []corev1.VolumeMount{{Name: "v", MountPath: "/x", SubPath: "y"}}},
		"privileged":    {Name: "c", SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)}},
	} {
		err := checkContainer(&c)
		if err == nil {
			t.Errorf("%s: accepted", field)
			continue
		}
		if !strings.Contains(err.Error(), "container c") || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: error %q does not name container and field", field, err)
		}
	}
}

func TestBoundingSet(t *testing.T) {
	caps, err := boundingSet(&corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: []corev1.Capability{"NET_ADMIN"}})
	if err != nil || len(caps) != 1 || caps[0] != capabilityNumbers["NET_ADMIN"] {
		t.Fatalf("drop ALL add NET_ADMIN = %v, %v", caps, err)
	}
	if caps, _ := boundingSet(nil); len(caps) != len(defaultCapabilities) {
		t.Fatalf("no capabilities section: %d, want the runtime's %d defaults", len(caps), len(defaultCapabilities))
	}
	if _, err := boundingSet(&corev1.Capabilities{Add: []corev1.Capability{"WAKE_ALARM"}}); err == nil {
		t.Fatal("an unknown capability must fail")
	}
}

func TestProbes(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/readyz" {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	addrPort := netip.MustParseAddrPort(strings.TrimPrefix(srv.URL, "http://"))
	c := &corev1.Container{Name: "c", Ports: []corev1.ContainerPort{{Name: "status", ContainerPort: int32(addrPort.Port())}}}
	probeAt := func(path string) *probe {
		spec := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromString("status")}}}
		return newProbe(c, "startup", spec, addrPort.Addr())
	}
	if err := probeAt("/healthz").once(context.Background()); err != nil {
		t.Errorf("a 200 answer must pass: %v", err)
	}
	if err := probeAt("/readyz").once(context.Background()); err == nil || !strings.Contains(err.Error(), "503") {
		t.Errorf("a 503 answer must fail naming it, got %v", err)
	}
	tcp := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(int32(addrPort.Port()))}}}
	if err := newProbe(c, "liveness", tcp, addrPort.Addr()).once(context.Background()); err != nil {
		t.Errorf("a TCP probe of a listening port must pass: %v", err)
	}
	if err := checkProbe(c, "startupProbe", &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromString("nope")}}}); err == nil ||
		!strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("an unknown port name must be refused naming it, got %v", err)
	}
}

// A projected volume is its sources' files in one directory: the downward API's and an optional
// ConfigMap's once it exists (injection v4's identity volume). A path two sources write, and a
// source the runner cannot make, are errors.
func TestProjectedVolume(t *testing.T) {
	ctx := context.Background()
	pod := &corev1.Pod{}
	pod.Name, pod.Namespace = "p", "ns"
	pod.Annotations = map[string]string{"kagenti.io/identity-defaults": "KAGENTI_WORKLOAD=w\n"}
	c := fake.NewClientBuilder().WithObjects(pod).Build()
	r := &podRun{k: &Kubelet{Client: c}, pod: pod, dir: t.TempDir()}
	src := &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
		{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{
			{Path: "defaults.env", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations['kagenti.io/identity-defaults']"}},
			{Path: "POD_NAMESPACE", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}}}},
		{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "w-token-exchange"}, Optional: ptr.To(true)}},
	}}
	vol, err := r.volumeSource(corev1.Volume{Name: "kagenti-identity", VolumeSource: corev1.VolumeSource{Projected: src}})
	if err != nil {
		t.Fatal(err)
	}
	names := func() map[string]string {
		files, err := vol.project(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for p, f := range files {
			out[p] = string(f.data)
		}
		return out
	}
	if got := names(); len(got) != 2 || got["defaults.env"] != "KAGENTI_WORKLOAD=w\n" || got["POD_NAMESPACE"] != "ns" {
		t.Fatalf("without the ConfigMap: %v", got)
	}
	if err := c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "w-token-exchange"}, Data: map[string]string{"config.yaml": "x: 1\n"}}); err != nil {
		t.Fatal(err)
	}
	if got := names(); len(got) != 3 || got["config.yaml"] != "x: 1\n" {
		t.Fatalf("with the ConfigMap: %v", got)
	}

	dup := src.DeepCopy()
	dup.Sources[0].DownwardAPI.Items[0].Path = "config.yaml"
	vol, err = r.volumeSource(corev1.Volume{Name: "dup", VolumeSource: corev1.VolumeSource{Projected: dup}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := vol.project(ctx); err == nil || !strings.Contains(err.Error(), "config.yaml") {
		t.Errorf("a path two sources write: %v", err)
	}
	token := &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}}}}
	if _, err := r.volumeSource(corev1.Volume{Name: "token", VolumeSource: corev1.VolumeSource{Projected: token}}); err == nil || !strings.Contains(err.Error(), "volume token") {
		t.Errorf("a service account token source: %v", err)
	}
}

// The containers' hostname is the kubelet's: spec.hostname, else the pod's name cut to 63
// characters (kagenti-authbridge reads it as the pod's name when no POD_NAME is projected).
func TestPodHostname(t *testing.T) {
	pod := &corev1.Pod{}
	pod.Name = "weather-agent-7d9f8c6b5d-abcde"
	if got := podHostname(pod); got != pod.Name {
		t.Errorf("hostname %q, want the pod's name", got)
	}
	pod.Name = strings.Repeat("a", 62) + "-b"
	if got := podHostname(pod); got != strings.Repeat("a", 62) {
		t.Errorf("a name over 63 characters: hostname %q", got)
	}
	pod.Spec.Hostname = "weather"
	if got := podHostname(pod); got != "weather" {
		t.Errorf("spec.hostname: hostname %q", got)
	}
	pod.Spec.SetHostnameAsFQDN = ptr.To(true)
	if err := checkPod(pod); err == nil || !strings.Contains(err.Error(), "setHostnameAsFQDN") {
		t.Errorf("setHostnameAsFQDN: %v", err)
	}
}
