package inject_test

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/kagenti/platform/injector/internal/config"
	"github.com/kagenti/platform/injector/internal/inject"
)

// TestAppendEncoded: the cached encoding of a rendered element is what encoding/json writes for it,
// and only the rendered element itself gets it, never a user's element of the same name.
func TestAppendEncoded(t *testing.T) {
	for _, mode := range []string{config.SidecarNative, config.SidecarClassic} {
		cfg := config.Default()
		cfg.SidecarMode = mode
		o, err := inject.ParseOptions("weather-agent", map[string]string{inject.LabelSpiffe: "enabled"}, nil)
		require.NoError(t, err)
		r, err := inject.Render(cfg, o)
		require.NoError(t, err)

		same := func(v any) {
			t.Helper()
			want, err := json.Marshal(v)
			require.NoError(t, err)
			got, ok := r.AppendEncoded([]byte("prefix"), v)
			require.True(t, ok, "%T has a cached encoding", v)
			require.Equal(t, "prefix"+string(want), string(got))
		}
		for _, l := range [][]corev1.Container{r.InitContainers, r.Containers} {
			for i := range l {
				same(&l[i])
			}
			if l != nil {
				same(l)
			}
		}
		for i := range r.Volumes {
			same(&r.Volumes[i])
		}
		same(r.Volumes)
		same(&r.UserMounts[0])
		same(r.UserMounts)

		// A user's container named like a component, with its own mounts and arguments.
		all := slices.Concat(r.InitContainers, r.Containers)
		own := *all[0].DeepCopy()
		_, ok := r.AppendEncoded(nil, &own)
		require.False(t, ok, "a user's %s is encoded per admission", own.Name)
		_, ok = r.AppendEncoded(nil, []corev1.Container{all[0], own})
		require.False(t, ok, "a list with a user's container is encoded per admission")
		vol := *r.Volumes[1].DeepCopy() // a configMap volume: same name, its own pointers
		_, ok = r.AppendEncoded(nil, &vol)
		require.False(t, ok)
		_, ok = r.AppendEncoded(nil, &corev1.EnvVar{Name: inject.EnvTraceDir, Value: inject.PathTrace})
		require.False(t, ok, "no variable is rendered")
		_, ok = r.AppendEncoded(nil, map[string]string{"a": "b"})
		require.False(t, ok)
		_, ok = r.AppendEncoded(nil, []corev1.Volume(nil))
		require.False(t, ok, "a nil list is left to encoding/json (null)")
	}
}
