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
	require.Len(t, r.results, 3, "%+v", r.results)
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
	require.Contains(t, fix, "    fix: kubectl label namespace "+forbidding+" pod-security.kubernetes.io/enforce=privileged --overwrite")
	requireLine(t, results, `✓ Pod Security of namespace `+allowing+`: enforces "baseline:latest", which allows what the injector added to its 1 injected workload(s)`)
	requireLine(t, results, `– Pod Security of namespace `+empty+`: enforces "baseline:latest"; no workload in it is injected yet`)

	base := readAll("apps/deployments", "/configmaps", "/services", "discovery.k8s.io/endpointslices",
		"admissionregistration.k8s.io/mutatingwebhookconfigurations", "admissionregistration.k8s.io/validatingwebhookconfigurations")
	fix = requireLine(t, runCheck(t, asUser(t, base...), opts), "✗ Pod Security: cannot list the namespaces selected for injection: ")
	require.Contains(t, fix, "    fix: check your access to namespaces")

	// Namespaces and Deployments, but not the other kinds the injector serves.
	fix = requireLine(t, runCheck(t, asUser(t, append(base, readAll("/namespaces")...)...), opts), "✗ Pod Security of namespace "+forbidding+": cannot list its workloads: ")
	require.Contains(t, fix, "    fix: check your access to the workloads of "+forbidding)
}
