package inject

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/kagenti/platform/injector/internal/config"
)

// TestRenderHashIsTheEncodingOfTheRendering: the hash assembled from the encoded elements is the
// hash of encoding/json's encoding of the rendering, which every stored status annotation carries.
func TestRenderHashIsTheEncodingOfTheRendering(t *testing.T) {
	for _, mode := range []string{config.SidecarNative, config.SidecarClassic} {
		for _, labels := range []map[string]string{nil, {LabelSpiffe: "enabled"}} {
			cfg := config.Default()
			cfg.SidecarMode = mode
			o, err := ParseOptions("weather-agent", labels, map[string]string{AnnotationExcludeComponents: ""})
			require.NoError(t, err)
			o.ServiceAccount = "weather <&>"
			r, err := Render(cfg, o)
			require.NoError(t, err)
			b, err := json.Marshal(struct {
				InitContainers, Containers []corev1.Container
				Volumes                    []corev1.Volume
				UserMounts                 []corev1.VolumeMount
				IdentityDefaults           string
			}{r.InitContainers, r.Containers, r.Volumes, r.UserMounts, r.IdentityDefaults})
			require.NoError(t, err)
			sum := sha256.Sum256(b)
			require.Equal(t, hex.EncodeToString(sum[:8]), r.Hash, "%s %v", mode, labels)
		}
	}
}
