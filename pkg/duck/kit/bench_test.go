package kit

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// BenchmarkContentHash hashes a ConfigMap of the size the pillars write (a handful of files, ~8 KiB).
func BenchmarkContentHash(b *testing.B) {
	cm := &corev1.ConfigMap{Data: map[string]string{}}
	for i := 0; i < 8; i++ {
		cm.Data[fmt.Sprintf("file-%d", i)] = strings.Repeat("x", 1024)
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = ContentHash(cm)
	}
}
