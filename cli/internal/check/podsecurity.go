package check

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
			fmt.Sprintf("kubectl label namespace %s %s=privileged --overwrite (the injection's proxy-init needs NET_ADMIN), or stop injecting these workloads (label %s=disabled); docs/injector.md#pod-security", ns.Name, podsecurity.EnforceLabel, labelInject),
			"enforces %q, which forbids what the injector added to %s: %s; the API server refuses their pods", lv.String(), strings.Join(refused, ", "), strings.Join(reasons, ", "))
	}
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
