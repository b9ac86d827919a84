package inject_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/kagenti/platform/injector/internal/config"
	"github.com/kagenti/platform/injector/internal/inject"
)

func TestParseOptionsInvalid(t *testing.T) {
	for _, tc := range []struct {
		name        string
		labels      map[string]string
		annotations map[string]string
		wantKey     string
		wantMsg     string
	}{
		{"unknown component", nil, map[string]string{inject.AnnotationExcludeComponents: "envoy,auth-proxy"}, inject.AnnotationExcludeComponents, "accepted values (comma list): proxy-init, spiffe-helper, client-registration, auth-proxy, envoy-proxy"},
		{"port not a number", nil, map[string]string{inject.AnnotationOutboundExclude: "443,http"}, inject.AnnotationOutboundExclude, "comma list of ports 1-65535"},
		{"port out of range", nil, map[string]string{inject.AnnotationInboundExclude: "70000"}, inject.AnnotationInboundExclude, "comma list of ports 1-65535"},
		{"bad quantity", nil, map[string]string{"kagenti.io/authbridge-memory": "lots"}, "kagenti.io/authbridge-memory", `"lots": accepted values: a memory quantity from 1Mi to 64Gi`},
		{"negative quantity", nil, map[string]string{"kagenti.io/authbridge-cpu-limit": "-1"}, "kagenti.io/authbridge-cpu-limit", `"-1": accepted values: a cpu quantity from 1m to 64`},
		// Quantities that parse but do not fit an int64 (1e400 is stored as 10e399 with value 0;
		// 8Ei and 999999999Ei become the largest int64): denied, quoting the user's own text.
		{"overflowing exponent", nil, map[string]string{"kagenti.io/authbridge-cpu": "1e400"}, "kagenti.io/authbridge-cpu", `"1e400": accepted values: a cpu quantity from 1m to 64`},
		{"8Ei", nil, map[string]string{"kagenti.io/authbridge-memory-limit": "8Ei"}, "kagenti.io/authbridge-memory-limit", `"8Ei": accepted values: a memory quantity from 1Mi to 64Gi`},
		{"999999999Ei", nil, map[string]string{"kagenti.io/authbridge-memory": "999999999Ei"}, "kagenti.io/authbridge-memory", `"999999999Ei": accepted values`},
		{"zero", nil, map[string]string{"kagenti.io/authbridge-memory": "0"}, "kagenti.io/authbridge-memory", `"0": accepted values`},
		{"below a millicore", nil, map[string]string{"kagenti.io/authbridge-cpu": "100u"}, "kagenti.io/authbridge-cpu", `"100u": accepted values`},
		{"above the bound", nil, map[string]string{"kagenti.io/authbridge-cpu-limit": "65"}, "kagenti.io/authbridge-cpu-limit", `"65": accepted values`},
		{"resource of unknown component", nil, map[string]string{"kagenti.io/envoy-cpu": "100m"}, "kagenti.io/envoy-cpu", "container one of proxy-init, spiffe-helper, authbridge"},
		// The roles run in one container since the combined sidecar: their own keys are refused, naming the new one.
		{"resource of a role", nil, map[string]string{"kagenti.io/envoy-proxy-memory": "256Mi"}, "kagenti.io/envoy-proxy-memory", "envoy-proxy runs in the authbridge container with the other identity roles and has no resources of its own; use kagenti.io/authbridge-memory"},
		{"spiffe label", map[string]string{inject.LabelSpiffe: "yes"}, nil, inject.LabelSpiffe, "accepted values: enabled, disabled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := inject.ParseOptions("w", tc.labels, tc.annotations)
			var bad *inject.InvalidError
			require.ErrorAs(t, err, &bad)
			require.Equal(t, tc.wantKey, bad.Key)
			require.Contains(t, err.Error(), tc.wantMsg)
			require.Contains(t, err.Error(), tc.wantKey, "the message names the key")
		})
	}
}

func TestParseOptions(t *testing.T) {
	o, err := inject.ParseOptions("w", map[string]string{inject.LabelSpiffe: "enabled"}, map[string]string{
		inject.AnnotationExcludeComponents: " auth-proxy ,, envoy-proxy",
		inject.AnnotationOutboundExclude:   "443, 80,443",
		"kagenti.io/authbridge-cpu":        "100m",
		"kagenti.io/authbridge-cpu-limit":  "1",
		"kagenti.io/type":                  "agent", // other kagenti.io keys are not ours to judge
	})
	require.NoError(t, err)
	require.True(t, o.Spiffe)
	require.Equal(t, map[string]bool{config.AuthProxy: true, config.EnvoyProxy: true}, o.Exclude)
	require.Equal(t, []int32{80, 443}, o.OutboundPortsExclude)
	r := o.Resources[config.Authbridge]
	require.True(t, r.Requests.Cpu().Equal(resource.MustParse("100m")))
	require.True(t, r.Limits.Cpu().Equal(resource.MustParse("1")))
}

func TestResourceBounds(t *testing.T) {
	o, err := inject.ParseOptions("w", nil, map[string]string{
		"kagenti.io/authbridge-cpu": "1m", "kagenti.io/authbridge-cpu-limit": "64",
		"kagenti.io/authbridge-memory": "1Mi", "kagenti.io/authbridge-memory-limit": "64Gi",
	})
	require.NoError(t, err, "the bounds themselves are accepted")
	lim := o.Resources[config.Authbridge].Limits
	require.True(t, lim.Cpu().Equal(resource.MustParse("64")))
}

// A request above its limit is denied naming the annotation the user wrote, quoting its text.
func TestRenderRequestAboveLimitDenied(t *testing.T) {
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		wantKey     string
		wantMsg     string
	}{
		{"annotated request, configured limit", map[string]string{"kagenti.io/authbridge-memory": "1.5Gi"},
			"kagenti.io/authbridge-memory", `invalid value "1.5Gi": the memory request exceeds its limit 256Mi (injector configuration)`},
		{"both annotated", map[string]string{"kagenti.io/authbridge-memory": "0.5Gi", "kagenti.io/authbridge-memory-limit": "300Mi"},
			"kagenti.io/authbridge-memory", `invalid value "0.5Gi": the memory request exceeds its limit "300Mi" (kagenti.io/authbridge-memory-limit)`},
		{"annotated limit below the configured request", map[string]string{"kagenti.io/authbridge-memory-limit": "16Mi"},
			"kagenti.io/authbridge-memory-limit", `invalid value "16Mi": the memory limit is below the configured request 64Mi`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := inject.ParseOptions("w", nil, tc.annotations)
			require.NoError(t, err)
			_, err = inject.Render(config.Default(), o)
			var bad *inject.InvalidError
			require.ErrorAs(t, err, &bad)
			require.Equal(t, tc.wantKey, bad.Key)
			require.Contains(t, err.Error(), tc.wantMsg)
		})
	}
}

// Without envoy-proxy, proxy-init still runs (inbound redirect, helper.conf) but every role is told
// that outbound is off, so that nothing is redirected to a proxy that does not exist.
func TestRenderWithoutEnvoyTurnsOutboundOff(t *testing.T) {
	o, err := inject.ParseOptions("w", nil, map[string]string{inject.AnnotationExcludeComponents: "envoy-proxy"})
	require.NoError(t, err)
	r, err := inject.Render(config.Default(), o)
	require.NoError(t, err)
	require.Equal(t, config.ProxyInit, r.InitContainers[0].Name)
	for _, c := range r.InitContainers {
		require.Contains(t, c.VolumeMounts, corev1.VolumeMount{Name: inject.VolumeIdentity, MountPath: inject.PathIdentity}, c.Name)
	}
	require.Equal(t, config.Authbridge, r.InitContainers[1].Name)
	require.Equal(t, []string{"sidecar", "register", "inbound"}, r.InitContainers[1].Args, "no outbound role")
	require.Contains(t, r.IdentityDefaults, "\nKAGENTI_OUTBOUND_ENABLED=false\n")
}

// Without any proxy and without spiffe, proxy-init has nothing to do and is not injected.
func TestRenderWithoutProxiesOrSpiffeHasNoProxyInit(t *testing.T) {
	o, err := inject.ParseOptions("w", nil, map[string]string{inject.AnnotationExcludeComponents: "envoy-proxy,auth-proxy"})
	require.NoError(t, err)
	r, err := inject.Render(config.Default(), o)
	require.NoError(t, err)
	require.Len(t, r.InitContainers, 1)
	require.Equal(t, config.Authbridge, r.InitContainers[0].Name)
	require.Equal(t, []string{"sidecar", "register"}, r.InitContainers[0].Args)
}

// spiffe-helper reads the helper.conf proxy-init writes: excluding proxy-init alone is refused.
func TestRenderSpiffeWithoutProxyInitDenied(t *testing.T) {
	o, err := inject.ParseOptions("w", map[string]string{inject.LabelSpiffe: "enabled"}, map[string]string{inject.AnnotationExcludeComponents: "proxy-init"})
	require.NoError(t, err)
	_, err = inject.Render(config.Default(), o)
	var bad *inject.InvalidError
	require.ErrorAs(t, err, &bad)
	require.Equal(t, inject.AnnotationExcludeComponents, bad.Key)
	require.ErrorContains(t, err, "spiffe-helper needs proxy-init")
}
