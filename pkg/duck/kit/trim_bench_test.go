package kit

import (
	"bytes"
	stdjson "encoding/json"
	"fmt"
	"os"
	"runtime"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// slimForBench is tokenexchange's template trim: metadata and service account.
func slimForBench(t corev1.PodTemplateSpec) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{ObjectMeta: t.ObjectMeta, Spec: corev1.PodSpec{ServiceAccountName: t.Spec.ServiceAccountName}}
}

// BenchmarkWorkloadCacheEntry measures what one cached Deployment costs in the informer store
// (B/object: heap retained after GC by 1,000 of them, each decoded from its own JSON as a watch
// delivers it and passed through the cache transform), for the representations considered for
// TrimmedWorkloads. The Deployment is testdata/workloads/deployment.json: applied with kubectl,
// injected, with the defaults and status the API server adds; the template is trimmed as
// tokenexchange trims it.
//
//	go test -run '^$' -bench WorkloadCacheEntry -benchtime 5x ./pkg/duck/
func BenchmarkWorkloadCacheEntry(b *testing.B) {
	raw, err := os.ReadFile("../testdata/workloads/deployment.json")
	if err != nil {
		b.Fatal(err)
	}
	const n = 1000
	docs := make([][]byte, n)
	for i := range docs {
		d := bytes.ReplaceAll(raw, []byte("NAME"), fmt.Appendf(nil, "agent-%d", i))
		d = bytes.ReplaceAll(d, []byte(`"RV"`), fmt.Appendf(nil, `"%d"`, 1000+i))
		docs[i] = bytes.ReplaceAll(d, []byte(`"UID"`), fmt.Appendf(nil, `"6f1c2b1e-0000-4000-8000-%012d"`, i))
	}
	decodeUnstructured := func(d []byte) any {
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(d); err != nil {
			b.Fatal(err)
		}
		return u
	}
	decodeTyped := func(d []byte) any {
		dep := &appsv1.Deployment{}
		if err := stdjson.Unmarshal(d, dep); err != nil {
			b.Fatal(err)
		}
		return dep
	}
	for _, c := range []struct {
		name      string
		decode    func([]byte) any
		transform func(any) (any, error)
	}{
		{"whole-unstructured", decodeUnstructured, func(o any) (any, error) { return o, nil }},
		// What TrimmedWorkloads cached before (informers of unstructured objects).
		{"unstructured-TrimWorkload", decodeUnstructured, TrimWorkload(slimForBench)},
		// The cheapest unstructured form considered: new maps holding only what is read, keys
		// from constants, the decoder's values shared.
		{"unstructured-compact", decodeUnstructured, func(o any) (any, error) {
			u := o.(*unstructured.Unstructured)
			md := u.Object["metadata"].(map[string]any)
			m := make(map[string]any, 8)
			for _, k := range []string{"name", "namespace", "uid", "resourceVersion", "generation", "creationTimestamp", "labels"} {
				if v, ok := md[k]; ok {
					m[k] = v
				}
			}
			if a, ok := md["annotations"].(map[string]any); ok {
				delete(a, lastApplied)
				m["annotations"] = a
			}
			spec := u.Object["spec"].(map[string]any)
			tmpl := spec["template"].(map[string]any)
			tmd := tmpl["metadata"].(map[string]any)
			delete(tmd, "creationTimestamp")
			ts := tmpl["spec"].(map[string]any)
			return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": m,
				"spec": map[string]any{"selector": spec["selector"], "template": map[string]any{"metadata": tmd,
					"spec": map[string]any{"serviceAccountName": ts["serviceAccountName"]}}}}}, nil
		}},
		// What TrimmedWorkloads caches.
		{"typed-TrimWorkload", decodeTyped, TrimWorkload(slimForBench)},
	} {
		b.Run(c.name, func(b *testing.B) {
			kept := make([]any, n)
			var perObject float64
			for b.Loop() {
				clear(kept)
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				for i, d := range docs {
					o, err := c.transform(c.decode(d))
					if err != nil {
						b.Fatal(err)
					}
					kept[i] = o
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				perObject = float64(after.HeapAlloc-before.HeapAlloc) / n
			}
			runtime.KeepAlive(kept)
			b.ReportMetric(perObject, "B/object")
		})
	}
}
