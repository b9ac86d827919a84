package inject_test

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/kagenti/platform/injector/internal/config"
	"github.com/kagenti/platform/injector/internal/inject"
)

// LargeTemplate is a pod template with 10 containers and 500 environment variables in all.
func LargeTemplate() *corev1.PodTemplateSpec {
	t := &corev1.PodTemplateSpec{}
	for i := range 10 {
		c := corev1.Container{Name: fmt.Sprintf("c%d", i), Image: "example.com/app:1"}
		for j := range 50 {
			c.Env = append(c.Env, corev1.EnvVar{Name: fmt.Sprintf("VAR_%d_%d", i, j), Value: "value"})
		}
		t.Spec.Containers = append(t.Spec.Containers, c)
	}
	return t
}

// BenchmarkInject measures Render + Inject (the pure part of the admission path) on a large template.
func BenchmarkInject(b *testing.B) {
	cfg := config.Default()
	tmpl := LargeTemplate()
	o, _ := inject.ParseOptions("weather-agent", map[string]string{inject.LabelSpiffe: "enabled"}, nil)
	b.ReportAllocs()
	for b.Loop() {
		r, err := inject.Render(cfg, o)
		if err != nil {
			b.Fatal(err)
		}
		if _, _, err := inject.Inject(tmpl, r); err != nil {
			b.Fatal(err)
		}
	}
}
