package check

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"k8s.io/pod-security-admission/api"

	"github.com/kagenti/platform/pkg/configmap/contract"
	"github.com/kagenti/platform/pkg/configmap/podsecurity"
)

// The namespace label the injector's namespaceSelector selects, and the workload label it acts on.
const (
	labelInjection = "kagenti.io/injection"
	labelInject    = "kagenti.io/inject"
)

// podSecurity checks, for every namespace selected for injection that enforces a Pod Security level
// beyond privileged, that the level allows what the injector added to its workloads' pod templates:
// Pod Security Admission admits the workload and refuses its pods, so a forbidden injection is a
// workload that never gets a pod (issue 27). One line per such namespace; the reasons are the API
// server's own (k8s.io/pod-security-admission, through pkg/configmap/podsecurity, the injector's
// admission warning's code).
func (r *runner) podSecurity(ctx context.Context) {
	if !r.opts.expects("injector") {
		return
	}
	nss, err := r.c.Kube.CoreV1().Namespaces().List(ctx, metav1.ListOptions{LabelSelector: labelInjection + " in (enabled,true)"})
	if err != nil {
		r.fail("Pod Security", "check your access to namespaces", "cannot list the namespaces selected for injection: %v", err)
		return
	}
	for _, ns := range nss.Items {
		lv, enforced := podsecurity.Enforced(ns.Labels)
		if !enforced {
			continue
		}
		subject := "Pod Security of namespace " + ns.Name
		r.interceptionModes(ns.Name, lv)
		templates, err := r.injectedTemplates(ctx, ns.Name)
		if err != nil {
			r.fail(subject, "check your access to the workloads of "+ns.Name, "cannot list its workloads: %v", err)
			continue
		}
		if len(templates) == 0 {
			r.skip(subject, "enforces %q; no workload in it is injected yet", lv.String())
			continue
		}
		var refused []string
		var reasons []string
		for _, w := range templates {
			if rs := podsecurity.Forbidden(lv, w.template); len(rs) > 0 {
				refused = append(refused, w.name)
				if reasons == nil {
					reasons = rs
				}
			}
		}
		if len(refused) == 0 {
			r.pass(subject, "enforces %q, which allows what the injector added to its %d injected workload(s)", lv.String(), len(templates))
			continue
		}
		r.fail(subject,
			fmt.Sprintf("label these workloads %s=%s (proxy mode: no capability needed), or kubectl label namespace %s %s=privileged --overwrite (the injection's proxy-init needs NET_ADMIN), or stop injecting them (label %s=disabled); docs/injector.md#pod-security", labelInterception, modeProxy, ns.Name, podsecurity.EnforceLabel, labelInject),
			"enforces %q, which forbids what the injector added to %s: %s; the API server refuses their pods", lv.String(), strings.Join(refused, ", "), strings.Join(reasons, ", "))
	}
}

// The workload label that chooses the injector's interception mode (docs/identity.md,
// "Interception modes"), and its values.
const (
	labelInterception = "kagenti.io/interception"
	modeTransparent   = "transparent"
	modeProxy         = "proxy"
)

// interceptionModes reports which interception modes a namespace enforcing lv admits the pods
// of: each mode's injected containers, as the injector renders them, evaluated with the API
// server's own Pod Security checks (the pod-level fields a pod there needs anyway, non-root and
// seccomp RuntimeDefault, are the user's and set in both).
func (r *runner) interceptionModes(namespace string, lv api.LevelVersion) {
	subject := "Interception modes in namespace " + namespace
	transparent := podsecurity.Forbidden(lv, ptrTo(modeTemplate(modeTransparent)))
	proxy := podsecurity.Forbidden(lv, ptrTo(modeTemplate(modeProxy)))
	switch {
	case len(transparent) == 0:
		r.pass(subject, "enforces %q: transparent and proxy mode allowed", lv.String())
	case len(proxy) == 0:
		r.pass(subject, "enforces %q: transparent mode refused here (%s); use proxy mode: label the workloads %s=%s (docs/identity.md#interception-modes)",
			lv.String(), strings.Join(transparent, ", "), labelInterception, modeProxy)
	default:
		r.fail(subject, fmt.Sprintf("kubectl label namespace %s %s=baseline --overwrite (or privileged)", namespace, podsecurity.EnforceLabel),
			"enforces %q, which refuses both modes: transparent (%s), proxy (%s)", lv.String(), strings.Join(transparent, ", "), strings.Join(proxy, ", "))
	}
}

func ptrTo[T any](v T) *T { return &v }

// modeTemplate is a pod template as the injector leaves it in mode (the security contexts of
// docs/injector.md: proxy-init as root with NET_ADMIN in transparent mode; in proxy mode no
// proxy-init, every injected container non-root with no capability), around an agent that
// Pod Security restricted admits.
func modeTemplate(mode string) corev1.PodTemplateSpec {
	nonRoot := func() *corev1.SecurityContext {
		return &corev1.SecurityContext{RunAsUser: ptrTo[int64](1337), RunAsGroup: ptrTo[int64](1337), RunAsNonRoot: ptrTo(true),
			AllowPrivilegeEscalation: ptrTo(false), ReadOnlyRootFilesystem: ptrTo(true), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}
	}
	t := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{contract.InjectionStatusAnnotation: `{"version":"v5","hash":"0"}`}},
		Spec: corev1.PodSpec{
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptrTo(true), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			InitContainers:  []corev1.Container{{Name: contract.ContainerAuthbridge, Image: "kagenti-authbridge", RestartPolicy: ptrTo(corev1.ContainerRestartPolicyAlways), SecurityContext: nonRoot()}},
			Containers: []corev1.Container{{Name: "agent", Image: "agent", SecurityContext: &corev1.SecurityContext{RunAsUser: ptrTo[int64](1000),
				AllowPrivilegeEscalation: ptrTo(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}}},
		},
	}
	if mode == modeTransparent {
		t.Spec.InitContainers = append([]corev1.Container{{Name: "proxy-init", Image: "kagenti-authbridge", SecurityContext: &corev1.SecurityContext{
			RunAsUser: ptrTo[int64](0), RunAsNonRoot: ptrTo(false), AllowPrivilegeEscalation: ptrTo(false), ReadOnlyRootFilesystem: ptrTo(true),
			Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_ADMIN"}, Drop: []corev1.Capability{"ALL"}}}}}, t.Spec.InitContainers...)
	}
	return t
}

// workloadTemplate is a workload's pod template, with the workload's kind and name.
type workloadTemplate struct {
	name     string // "Deployment weather-agent"
	template *corev1.PodTemplateSpec
}

// injectedTemplates returns the pod templates of the workloads of namespace labelled for injection
// that carry an injection (the injector's status annotation), of the five kinds it serves.
func (r *runner) injectedTemplates(ctx context.Context, namespace string) ([]workloadTemplate, error) {
	opts := metav1.ListOptions{LabelSelector: labelInject}
	apps, batch := r.c.Kube.AppsV1(), r.c.Kube.BatchV1()
	var out []workloadTemplate
	add := func(kind, name string, t *corev1.PodTemplateSpec) {
		if _, ok := t.Annotations[contract.InjectionStatusAnnotation]; ok {
			out = append(out, workloadTemplate{name: kind + " " + name, template: t})
		}
	}
	ds, err := apps.Deployments(namespace).List(ctx, opts)
	if err != nil {
		return nil, err
	}
	for i := range ds.Items {
		add("Deployment", ds.Items[i].Name, &ds.Items[i].Spec.Template)
	}
	ss, err := apps.StatefulSets(namespace).List(ctx, opts)
	if err != nil {
		return nil, err
	}
	for i := range ss.Items {
		add("StatefulSet", ss.Items[i].Name, &ss.Items[i].Spec.Template)
	}
	dss, err := apps.DaemonSets(namespace).List(ctx, opts)
	if err != nil {
		return nil, err
	}
	for i := range dss.Items {
		add("DaemonSet", dss.Items[i].Name, &dss.Items[i].Spec.Template)
	}
	js, err := batch.Jobs(namespace).List(ctx, opts)
	if err != nil {
		return nil, err
	}
	for i := range js.Items {
		if metav1.GetControllerOf(&js.Items[i]) != nil {
			continue // a CronJob's run: its CronJob is checked
		}
		add("Job", js.Items[i].Name, &js.Items[i].Spec.Template)
	}
	cjs, err := batch.CronJobs(namespace).List(ctx, opts)
	if err != nil {
		return nil, err
	}
	for i := range cjs.Items {
		add("CronJob", cjs.Items[i].Name, &cjs.Items[i].Spec.JobTemplate.Spec.Template)
	}
	return out, nil
}
