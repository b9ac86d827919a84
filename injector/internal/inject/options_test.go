package inject_test

import (
	"testing"

	"github.com/stretchr/testify/require"
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
		{"bad quantity", nil, map[string]string{"kagenti.io/envoy-proxy-memory": "lots"}, "kagenti.io/envoy-proxy-memory", "positive quantity"},
		{"negative quantity", nil, map[string]string{"kagenti.io/envoy-proxy-cpu-limit": "-1"}, "kagenti.io/envoy-proxy-cpu-limit", "positive quantity"},
		{"resource of unknown component", nil, map[string]string{"kagenti.io/envoy-cpu": "100m"}, "kagenti.io/envoy-cpu", "component one of proxy-init"},
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
		"kagenti.io/envoy-proxy-cpu":       "100m",
		"kagenti.io/envoy-proxy-cpu-limit": "1",
		"kagenti.io/type":                  "agent", // other kagenti.io keys are not ours to judge
	})
	require.NoError(t, err)
	require.True(t, o.Spiffe)
	require.Equal(t, map[string]bool{config.AuthProxy: true, config.EnvoyProxy: true}, o.Exclude)
	require.Equal(t, []int32{80, 443}, o.OutboundPortsExclude)
	r := o.Resources[config.EnvoyProxy]
	require.True(t, r.Requests.Cpu().Equal(resource.MustParse("100m")))
	require.True(t, r.Limits.Cpu().Equal(resource.MustParse("1")))
}

func TestRenderRequestAboveLimitDenied(t *testing.T) {
	o, err := inject.ParseOptions("w", nil, map[string]string{"kagenti.io/envoy-proxy-memory": "1Gi"})
	require.NoError(t, err)
	_, err = inject.Render(config.Default(), o)
	var bad *inject.InvalidError
	require.ErrorAs(t, err, &bad)
	require.Equal(t, "kagenti.io/envoy-proxy-memory", bad.Key)
	require.Contains(t, err.Error(), "exceeds its limit 256Mi")
}

func TestRenderWithoutEnvoyHasNoProxyInit(t *testing.T) {
	o, err := inject.ParseOptions("w", nil, map[string]string{inject.AnnotationExcludeComponents: "envoy-proxy"})
	require.NoError(t, err)
	r, err := inject.Render(config.Default(), o)
	require.NoError(t, err)
	for _, c := range r.InitContainers {
		require.NotEqual(t, config.ProxyInit, c.Name, "outbound traffic must not be redirected to a missing envoy-proxy")
		require.NotEqual(t, config.EnvoyProxy, c.Name)
	}
}
