package inject_test

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/kagenti/platform/injector/internal/config"
	"github.com/kagenti/platform/injector/internal/inject"
	"github.com/kagenti/platform/pkg/configmap/contract"
	"github.com/kagenti/platform/pkg/duck"
)

// testdata/v1 holds objects an injector of status v1 wrote (the goldens before the status became
// v2, and before the identity defaults became differences). This injector strips and re-injects
// them exactly as that one did: removal restores the user's template, re-injection equals a fresh
// injection, and an unchanged rendering leaves them alone.
func TestStatusV1IsStillRead(t *testing.T) {
	forEachOldInjection(t, "testdata/v1", inject.StatusV1, func(t *testing.T, o oldInjection) {
		st, orig, old, cfg := o.status, o.orig, o.old, o.cfg
		require.NotEmpty(t, st.InitContainers)
		fresh, again := o.removeAndReinject(t)
		st2, err := inject.ReadStatus(again)
		require.NoError(t, err)
		require.Equal(t, inject.StatusVersion, st2.Version)

		// The same v1 object as if its rendering were today's: left alone.
		sameHash := fresh.DeepCopy()
		st.Hash = st2.Hash
		// and listing today's container names (the v1 lists name the roles' own containers).
		injected := func(cs []corev1.Container) (names []string) {
			for _, c := range cs {
				if slices.Contains(inject.InjectedContainers(inject.StatusVersion), c.Name) {
					names = append(names, c.Name)
				}
			}
			return names
		}
		st.InitContainers, st.Containers = injected(fresh.Spec.InitContainers), injected(fresh.Spec.Containers)
		// and today's volumes and variables (v4 projects the token-exchange ConfigMap into the
		// identity volume, and adds no variable).
		st.Volumes = nil
		for _, v := range fresh.Spec.Volumes {
			if slices.Contains(contract.InjectedVolumes, v.Name) {
				st.Volumes = append(st.Volumes, v.Name)
			}
		}
		st.Env = nil
		b, err := json.Marshal(st)
		require.NoError(t, err)
		sameHash.Annotations[inject.AnnotationStatus] = string(b)
		out, changed := injectTemplate(t, old, sameHash, cfg)
		require.False(t, changed, "a v1 status with the current hash and everything present is not re-injected")
		require.Same(t, sameHash, out)
		removed, _, err := inject.Remove(sameHash)
		require.NoError(t, err)
		require.True(t, equality.Semantic.DeepEqual(orig, removed))
	})
}

// oldInjection is a workload an older injector wrote (testdata/v1, testdata/v2) beside the user's
// template it started from (testdata/inputs).
type oldInjection struct {
	cfg      *config.Config
	input    *duck.Workload          // the user's workload
	orig     *corev1.PodTemplateSpec // its template
	old      *duck.Workload          // the workload as the older injector left it
	injected *corev1.PodTemplateSpec // old's template
	status   *inject.Status          // the status the older injector wrote
}

// forEachOldInjection runs f on every object in dir, whose status must be of version.
func forEachOldInjection(t *testing.T, dir, version string, f func(*testing.T, oldInjection)) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, file := range files {
		kind, name, _ := strings.Cut(strings.TrimSuffix(filepath.Base(file), ".yaml"), ".")
		i := slices.IndexFunc(variants, func(v variant) bool { return v.name == name })
		require.GreaterOrEqual(t, i, 0, file)
		v := variants[i]
		t.Run(filepath.Base(file), func(t *testing.T) {
			o := oldInjection{cfg: config.Default()}
			if v.classic {
				o.cfg.SidecarMode = config.SidecarClassic
			}
			var err error
			o.input = readWorkload(t, filepath.Join("testdata", "inputs", kind+".yaml"), v)
			o.orig, err = o.input.PodTemplate()
			require.NoError(t, err)
			o.old = readWorkload(t, file, v)
			o.injected, err = o.old.PodTemplate()
			require.NoError(t, err)
			o.status, err = inject.ReadStatus(o.injected)
			require.NoError(t, err)
			require.Equal(t, version, o.status.Version)
			f(t, o)
		})
	}
}

// removeAndReinject checks that removal restores the user's template and that the next admission
// re-injects the old object into what a fresh injection gives; it returns both.
func (o oldInjection) removeAndReinject(t *testing.T) (fresh, again *corev1.PodTemplateSpec) {
	t.Helper()
	removed, changed, err := inject.Remove(o.injected)
	require.NoError(t, err)
	require.True(t, changed)
	require.True(t, equality.Semantic.DeepEqual(o.orig, removed), "removal restores the user's template:\nwant %s\ngot  %s", yamlOf(t, o.orig), yamlOf(t, removed))
	again, changed = injectTemplate(t, o.old, o.injected, o.cfg)
	require.True(t, changed, "the rendering changed since: re-injected")
	fresh, _ = injectTemplate(t, o.input, o.orig, o.cfg)
	require.True(t, equality.Semantic.DeepEqual(fresh, again), "re-injection equals a fresh injection:\nwant %s\ngot  %s", yamlOf(t, fresh), yamlOf(t, again))
	return fresh, again
}

// The v2 status records only the exceptions; removal keeps every one of them: a user container
// named after a component that is not rendered, the user's version of a rendered one with its own
// trace mount, the user's own kagenti-trace volume (and a container's own KAGENTI_TRACE_DIR, which v4
// never touches).
func TestStatusV2KeepsTheExceptions(t *testing.T) {
	ownMount := corev1.VolumeMount{Name: inject.VolumeTrace, MountPath: "/trace"}
	tmpl := &corev1.PodTemplateSpec{Spec: corev1.PodSpec{
		Containers: []corev1.Container{
			{Name: "agent", Image: "a:1", Env: []corev1.EnvVar{{Name: inject.EnvTraceDir, Value: "/mine"}}},
			{Name: "sidecar", Image: "s:1", VolumeMounts: []corev1.VolumeMount{ownMount}},
			{Name: config.SpiffeHelper, Image: "example.com/not-spiffe:1"}, // spiffe is off: not rendered
			{Name: config.Authbridge, Image: "example.com/my-authbridge:1", VolumeMounts: []corev1.VolumeMount{ownMount}},
		},
		Volumes: []corev1.Volume{{Name: inject.VolumeTrace, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
	}}
	out, changed, err := inject.Inject(tmpl, render(t, config.Default()))
	require.NoError(t, err)
	require.True(t, changed)
	st, err := inject.ReadStatus(out)
	require.NoError(t, err)
	require.Equal(t, inject.StatusVersion, st.Version)
	require.Equal(t, []string{config.SpiffeHelper, config.Authbridge, inject.VolumeTrace}, st.Kept)
	require.Equal(t, []string{"sidecar", config.Authbridge}, st.OwnTraceMount)
	require.Empty(t, st.OwnTraceEnv, "v4 adds no variable: the user's KAGENTI_TRACE_DIR is simply theirs")
	require.Equal(t, inject.PathTrace, out.Spec.Containers[2].VolumeMounts[0].MountPath, "a container that is no rendered component gets the trace mount")

	removed, _, err := inject.Remove(out)
	require.NoError(t, err)
	require.Equal(t, tmpl, removed, "removal keeps everything of the user's")

	// Re-injection after a configuration change strips the same way.
	cfg := config.Default()
	cfg.Images.Authbridge = "ghcr.io/kagenti/kagenti-authbridge:v0.2.0"
	again, changed, err := inject.Inject(out, render(t, cfg))
	require.NoError(t, err)
	require.True(t, changed)
	fresh, _, err := inject.Inject(tmpl, render(t, cfg))
	require.NoError(t, err)
	require.Equal(t, fresh, again)
}

// The status annotation of a template injected without exceptions is the version and the hash.
func TestStatusV2IsCompact(t *testing.T) {
	out, _, err := inject.Inject(&corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "a:1"}}}}, render(t, config.Default()))
	require.NoError(t, err)
	st := out.Annotations[inject.AnnotationStatus]
	require.JSONEq(t, `{"version":"`+inject.StatusVersion+`","hash":"`+render(t, config.Default()).Hash+`"}`, st)
}

// A v1 status that an override shaped (what the v1 injector wrote for a template with a user
// container named after a component): removal keeps the user's container, kagenti-trace volume and
// KAGENTI_TRACE_DIR, which a v1 status does not list.
func TestStatusV1KeepsWhatItDoesNotList(t *testing.T) {
	tmpl := &corev1.PodTemplateSpec{Spec: corev1.PodSpec{
		Containers: []corev1.Container{
			{Name: "agent", Image: "a:1", Env: []corev1.EnvVar{{Name: inject.EnvTraceDir, Value: "/mine"}}},
			{Name: config.Authbridge, Image: "example.com/my-authbridge:1"},
		},
		Volumes: []corev1.Volume{{Name: inject.VolumeTrace, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
	}}
	out, _, err := inject.Inject(tmpl, render(t, config.Default()))
	require.NoError(t, err)
	out.Annotations[inject.AnnotationStatus] = `{"version":"v1","hash":"0c66dd10cedbcec8","initContainers":["proxy-init","client-registration","auth-proxy"],` +
		`"volumes":["kagenti-shared","kagenti-token-exchange","kagenti-identity","kagenti-idp-credentials"],"volumeMounts":{"agent":["kagenti-trace"]}}`
	removed, _, err := inject.Remove(out)
	require.NoError(t, err)
	require.Equal(t, tmpl, removed)
}

// A v3 status strips by its lists of injected names: every name any rendering adds must be in
// them, or removal would leave it behind.
func TestRenderedNamesAreTheContractsLists(t *testing.T) {
	require.Equal(t, config.Components, contract.InjectedComponents, "the names of v2 and of kagenti.io/exclude-components")
	require.Equal(t, config.Containers, inject.InjectedContainers(inject.StatusV3))
	for _, v := range variants {
		for _, socket := range []string{config.SocketCSI, config.SocketHostPath} {
			cfg := config.Default()
			cfg.SpireSocket.Type = socket
			if v.classic {
				cfg.SidecarMode = config.SidecarClassic
			}
			o, err := inject.ParseOptions("weather-agent", v.labels, v.annotations)
			require.NoError(t, err)
			r, err := inject.Render(cfg, o)
			require.NoError(t, err)
			for _, c := range slices.Concat(r.InitContainers, r.Containers) {
				require.Contains(t, inject.InjectedContainers(inject.StatusVersion), c.Name, v.name)
			}
			for _, vol := range r.Volumes {
				require.Contains(t, contract.InjectedVolumes, vol.Name, v.name)
			}
			for _, m := range r.UserMounts {
				require.Equal(t, inject.VolumeTrace, m.Name, "stripV2 removes this mount by name")
			}
		}
	}
}

// testdata/v2 holds objects an injector of status v2 wrote (the goldens before the combined
// sidecar: client-registration, auth-proxy and envoy-proxy in containers of their own). This
// injector recognises them, removes them exactly and upgrades them to the one authbridge container
// on their next admission.
func TestStatusV2IsUpgraded(t *testing.T) {
	forEachOldInjection(t, "testdata/v2", inject.StatusV2, func(t *testing.T, o oldInjection) {
		injectedV2 := o.injected
		roles := 0
		for _, c := range slices.Concat(injectedV2.Spec.InitContainers, injectedV2.Spec.Containers) {
			if c.Name == config.ClientRegistration || c.Name == config.AuthProxy || c.Name == config.EnvoyProxy {
				roles++
			}
		}
		require.Positive(t, roles, "a v2 template has the roles' own containers")

		_, again := o.removeAndReinject(t) // upgraded on its next admission
		for _, c := range slices.Concat(again.Spec.InitContainers, again.Spec.Containers) {
			require.NotContains(t, []string{config.ClientRegistration, config.AuthProxy, config.EnvoyProxy}, c.Name, "no role keeps a container of its own")
		}
		st, err := inject.ReadStatus(again)
		require.NoError(t, err)
		require.Equal(t, inject.StatusVersion, st.Version)
	})
}

// testdata/v3 holds objects an injector of status v3 wrote (the goldens before the lean injection
// of issue 15, for the inputs of testdata/v2): a downward-API identity volume, the token-exchange
// ConfigMap as a volume of its own, KAGENTI_TRACE_DIR in every user container, a liveness probe on
// the authbridge container. This injector removes them exactly (a user's own KAGENTI_TRACE_DIR
// is kept: TestStatusV2KeepsTheExceptions) and upgrades them on their next admission to what a
// fresh v4 injection gives.
func TestStatusV3IsUpgraded(t *testing.T) {
	forEachOldInjection(t, "testdata/v3", inject.StatusV3, func(t *testing.T, o oldInjection) {
		hasTraceEnv := func(tmpl *corev1.PodTemplateSpec) bool {
			return slices.ContainsFunc(tmpl.Spec.Containers, func(c corev1.Container) bool {
				return slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == inject.EnvTraceDir })
			})
		}
		hasVolume := func(tmpl *corev1.PodTemplateSpec, name string) bool {
			return slices.ContainsFunc(tmpl.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == name })
		}
		require.True(t, hasTraceEnv(o.injected), "a v3 template has the injected KAGENTI_TRACE_DIR")
		require.True(t, hasVolume(o.injected, contract.VolumeTokenExchange), "a v3 template has the token-exchange volume")

		_, again := o.removeAndReinject(t) // upgraded on its next admission
		require.False(t, hasTraceEnv(again), "v4 adds no KAGENTI_TRACE_DIR")
		require.False(t, hasVolume(again, contract.VolumeTokenExchange), "v4 projects the ConfigMap into the identity volume")
		i := slices.IndexFunc(again.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == inject.VolumeIdentity })
		require.GreaterOrEqual(t, i, 0)
		require.NotNil(t, again.Spec.Volumes[i].Projected, "the identity volume is projected")
		st, err := inject.ReadStatus(again)
		require.NoError(t, err)
		require.Equal(t, inject.StatusVersion, st.Version)
	})
}
