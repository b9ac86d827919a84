package duck

import (
	"fmt"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// BenchmarkWorkloadPodTemplateRoundTrip measures the cost every pillar pays to read and write a
// pod template through the duck view: a Deployment with 10 containers of 50 env vars each.
func BenchmarkWorkloadPodTemplateRoundTrip(b *testing.B) {
	dep := builtinObjects()["Deployment"].(*appsv1.Deployment)
	var containers []corev1.Container
	for i := 0; i < 10; i++ {
		c := corev1.Container{Name: fmt.Sprintf("c%d", i), Image: "agent:v1"}
		for j := 0; j < 50; j++ {
			c.Env = append(c.Env, corev1.EnvVar{Name: fmt.Sprintf("VAR_%d", j), Value: "value"})
		}
		containers = append(containers, c)
	}
	dep.Spec.Template.Spec.Containers = containers
	gvk := gvkOf("Deployment")
	b.ReportAllocs()
	for b.Loop() {
		w, err := NewWorkloadFromObject(dep, gvk)
		if err != nil {
			b.Fatal(err)
		}
		t, err := w.PodTemplate()
		if err != nil {
			b.Fatal(err)
		}
		if err := w.SetPodTemplate(t); err != nil {
			b.Fatal(err)
		}
	}
}
