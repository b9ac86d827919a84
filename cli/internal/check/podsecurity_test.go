package check

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/kagenti/platform/cli/internal/kube"
)

// injectedTemplate is a pod template as the injector leaves it: proxy-init (root, NET_ADMIN) in
// front, recorded by a v4 status; with netAdmin false, the proxy-init of a workload without proxies.
func injectedTemplate(netAdmin bool) corev1.PodTemplateSpec {
	sc := &corev1.SecurityContext{RunAsUser: ptr.To[int64](1337), RunAsNonRoot: ptr.To(true), AllowPrivilegeEscalation: ptr.To(false),
		Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}
	if netAdmin {
		sc = &corev1.SecurityContext{RunAsUser: ptr.To[int64](0), RunAsNonRoot: ptr.To(false), AllowPrivilegeEscalation: ptr.To(false),
			Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_ADMIN"}, Drop: []corev1.Capability{"ALL"}}}
	}
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"kagenti.io/injection-status": `{"version":"v4","hash":"0"}`}},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "proxy-init", Image: "i:1", SecurityContext: sc}},
			Containers:     []corev1.Container{{Name: "agent", Image: "a:1"}},
		}}
}

// `kagenti check` says, per namespace selected for injection whose Pod Security level forbids what
// was injected into its workloads, which workloads and why, with the fix; a namespace whose level
// allows it passes, one without injected workloads is skipped, one without a level has no line.
func TestCheckPodSecurityOfInjectedNamespaces(t *testing.T) {
	ns := func(name string, labels map[string]string) runtime.Object {
		return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	}
	injected := map[string]string{labelInject: "enabled"}
	deploy := func(ns, name string, tmpl corev1.PodTemplateSpec) runtime.Object {
		return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: injected}, Spec: appsv1.DeploymentSpec{Template: tmpl}}
	}
	cron := &batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{Namespace: "agents", Name: "nightly", Labels: injected},
		Spec: batchv1.CronJobSpec{JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: injectedTemplate(true)}}}}
	baseline := map[string]string{labelInjection: "enabled", "pod-security.kubernetes.io/enforce": "baseline"}
	clientset := fake.NewClientset(
		ns("agents", baseline),
		deploy("agents", "weather", injectedTemplate(true)),
		deploy("agents", "lean", injectedTemplate(false)),
		cron,
		ns("tools", map[string]string{labelInjection: "true", "pod-security.kubernetes.io/enforce": "baseline", "pod-security.kubernetes.io/enforce-version": "v1.30"}),
		deploy("tools", "lean", injectedTemplate(false)),
		ns("empty", baseline),
		ns("open", map[string]string{labelInjection: "enabled"}),
		deploy("open", "weather", injectedTemplate(true)),
		ns("elsewhere", map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}),
		deploy("elsewhere", "weather", injectedTemplate(true)),
	)
	r := &runner{c: &kube.Clients{Kube: clientset}, opts: Options{Pillars: AllPillars}}
	r.podSecurity(context.Background())

	byNS := map[string]Result{}
	for _, res := range r.results {
		byNS[res.Subject] = res
	}
	require.Len(t, r.results, 6, "%+v", r.results)
	for _, name := range []string{"agents", "tools", "empty"} {
		modes := byNS["Interception modes in namespace "+name]
		require.Equal(t, Pass, modes.Status, name)
		require.Contains(t, modes.Detail, `transparent mode refused here (non-default capabilities (container "proxy-init" must not include "NET_ADMIN" in securityContext.capabilities.add)); use proxy mode: label the workloads kagenti.io/interception=proxy`, name)
	}
	agents := byNS["Pod Security of namespace agents"]
	require.Equal(t, Fail, agents.Status)
	require.Equal(t, `enforces "baseline:latest", which forbids what the injector added to Deployment weather, CronJob nightly: `+
		`non-default capabilities (container "proxy-init" must not include "NET_ADMIN" in securityContext.capabilities.add); the API server refuses their pods`, agents.Detail)
	require.Contains(t, agents.Fix, "kubectl label namespace agents pod-security.kubernetes.io/enforce=privileged --overwrite")

	tools := byNS["Pod Security of namespace tools"]
	require.Equal(t, Pass, tools.Status)
	require.Contains(t, tools.Detail, `enforces "baseline:v1.30", which allows what the injector added to its 1 injected workload(s)`)

	require.Equal(t, Skip, byNS["Pod Security of namespace empty"].Status)
}

// TestInterceptionModesOfEachLevel: which modes each Pod Security level admits, as
// `kagenti check` reports them: privileged both (no line: nothing enforced), baseline and restricted
// only proxy mode (proxy-init's NET_ADMIN; restricted also its root).
func TestInterceptionModesOfEachLevel(t *testing.T) {
	for level, want := range map[string]string{
		"baseline":   `enforces "baseline:latest": transparent mode refused here (non-default capabilities (container "proxy-init" must not include "NET_ADMIN" in securityContext.capabilities.add)); use proxy mode`,
		"restricted": `enforces "restricted:latest": transparent mode refused here (unrestricted capabilities (container "proxy-init" must not include "NET_ADMIN" in securityContext.capabilities.add), runAsNonRoot != true (container "proxy-init" must not set securityContext.runAsNonRoot=false), runAsUser=0 (container "proxy-init" must not set runAsUser=0)); use proxy mode`,
	} {
		clientset := fake.NewClientset(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "agents",
			Labels: map[string]string{labelInjection: "enabled", "pod-security.kubernetes.io/enforce": level}}})
		r := &runner{c: &kube.Clients{Kube: clientset}, opts: Options{Pillars: AllPillars}}
		r.podSecurity(context.Background())
		require.NotEmpty(t, r.results)
		require.Equal(t, "Interception modes in namespace agents", r.results[0].Subject, level)
		require.Equal(t, Pass, r.results[0].Status, level)
		require.Contains(t, r.results[0].Detail, want, level)
	}
}

// The same lines on a real API server (Pod Security Admission admits the Deployments and would
// refuse their pods), and the lines when the namespaces or their workloads cannot be listed.
func TestCheckPodSecurityOnAnAPIServer(t *testing.T) {
	ctx := context.Background()
	baseline := map[string]string{labelInjection: "enabled", "pod-security.kubernetes.io/enforce": "baseline"}
	forbidding := createNamespace(t, uniqueName("psa-forbids"), baseline)
	allowing := createNamespace(t, uniqueName("psa-allows"), baseline)
	empty := createNamespace(t, uniqueName("psa-empty"), baseline)
	for ns, tmpl := range map[string]corev1.PodTemplateSpec{forbidding: injectedTemplate(true), allowing: injectedTemplate(false)} {
		tmpl.Labels = map[string]string{"app": "weather"}
		_, err := admin.Kube.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "weather", Labels: map[string]string{labelInject: "enabled"}},
			Spec:       appsv1.DeploymentSpec{Replicas: ptr.To[int32](0), Selector: &metav1.LabelSelector{MatchLabels: tmpl.Labels}, Template: tmpl},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	opts := Options{Namespace: installNamespace(t), Pillars: []string{"injector"}, ReadOnly: true}

	results := runCheck(t, clients(t), opts)
	fix := requireLine(t, results, `✗ Pod Security of namespace `+forbidding+`: enforces "baseline:latest", which forbids what the injector added to Deployment weather: `+
		`non-default capabilities (container "proxy-init" must not include "NET_ADMIN" in securityContext.capabilities.add); the API server refuses their pods`)
	require.Contains(t, fix, "    fix: label these workloads kagenti.io/interception=proxy (proxy mode: no capability needed), or kubectl label namespace "+forbidding+" pod-security.kubernetes.io/enforce=privileged --overwrite")
	requireLine(t, results, `✓ Pod Security of namespace `+allowing+`: enforces "baseline:latest", which allows what the injector added to its 1 injected workload(s)`)
	requireLine(t, results, `– Pod Security of namespace `+empty+`: enforces "baseline:latest"; no workload in it is injected yet`)
	requireLine(t, results, `✓ Interception modes in namespace `+empty+`: enforces "baseline:latest": transparent mode refused here (`)

	// The line's verdicts are the API server's: a pod of each mode's template, created with a
	// server-side dry run in a namespace that enforces restricted.
	restricted := createNamespace(t, uniqueName("psa-restricted"), map[string]string{"pod-security.kubernetes.io/enforce": "restricted"})
	_, err := admin.Kube.CoreV1().ServiceAccounts(restricted).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	dryRun := func(mode string) error {
		tmpl := modeTemplate(mode)
		_, err := admin.Kube.CoreV1().Pods(restricted).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: mode}, Spec: tmpl.Spec},
			metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}
	require.NoError(t, dryRun(modeProxy), "the API server admits the proxy-mode pod under restricted")
	err = dryRun(modeTransparent)
	require.Error(t, err)
	require.Contains(t, err.Error(), `violates PodSecurity "restricted:latest"`)
	require.Contains(t, err.Error(), `container "proxy-init" must not include "NET_ADMIN"`)

	base := readAll("apps/deployments", "/configmaps", "/services", "discovery.k8s.io/endpointslices",
		"admissionregistration.k8s.io/mutatingwebhookconfigurations", "admissionregistration.k8s.io/validatingwebhookconfigurations")
	fix = requireLine(t, runCheck(t, asUser(t, base...), opts), "✗ Pod Security: cannot list the namespaces selected for injection: ")
	require.Contains(t, fix, "    fix: check your access to namespaces")

	// Namespaces and Deployments, but not the other kinds the injector serves.
	fix = requireLine(t, runCheck(t, asUser(t, append(base, readAll("/namespaces")...)...), opts), "✗ Pod Security of namespace "+forbidding+": cannot list its workloads: ")
	require.Contains(t, fix, "    fix: check your access to the workloads of "+forbidding)
}
