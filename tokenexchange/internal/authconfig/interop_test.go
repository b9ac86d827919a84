package authconfig_test

import (
	"io"
	"os"
	"path"
	"path/filepath"
	"testing"

	"github.com/sirupsen/logrus"
	helperconfig "github.com/spiffe/spiffe-helper/cmd/spiffe-helper/config"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/kagenti/platform/pkg/duck/kit"
	"github.com/kagenti/platform/tokenexchange/api/v1alpha1"
	"github.com/kagenti/platform/tokenexchange/internal/authconfig"
)

func workload() authconfig.Workload {
	return authconfig.Workload{Namespace: "agents", Name: "weather-agent", PodName: "weather-agent-7d9f-abcde", ServiceAccount: "agent-sa"}
}

// parseWithSpiffeHelper runs helper.conf through spiffe-helper v0.11.0's own parser and
// validation, as its main does.
func parseWithSpiffeHelper(t *testing.T, conf string) *helperconfig.Config {
	t.Helper()
	file := filepath.Join(t.TempDir(), "helper.conf")
	require.NoError(t, os.WriteFile(file, []byte(conf), 0o600))
	c, err := helperconfig.ParseConfig(file, true, "daemon-mode")
	require.NoError(t, err, conf)
	log := logrus.New()
	log.SetOutput(io.Discard)
	require.NoError(t, c.ValidateConfig(log), conf)
	return c
}

func TestHelperConfIsReadBySpiffeHelper(t *testing.T) {
	jwt := authconfig.Config{Workload: workload(), Spiffe: authconfig.Spiffe{Enabled: true,
		SocketPath: "/run/spire/agent-sockets/agent.sock", OutputFormat: "jwt", Audience: "kagenti-agents"}}
	odd := jwt
	odd.Spiffe.Audience = `aud "with" quotes, a \ and ${x}`
	odd.Spiffe.SocketPath = "/run/spire/agent-sockets/with space.sock"
	opts := authconfig.HelperOptions{CertDir: "/shared", FileMode: authconfig.DefaultHelperFileMode, HealthPort: 15127}

	t.Run("jwt", func(t *testing.T) {
		c := parseWithSpiffeHelper(t, authconfig.RenderHelperConf(jwt, opts))
		assert.Equal(t, "/run/spire/agent-sockets/agent.sock", c.AgentAddress, "a plain path: spiffe-helper prefixes unix:// itself")
		require.Len(t, c.JWTSVIDs, 1)
		assert.Equal(t, "kagenti-agents", c.JWTSVIDs[0].JWTAudience)
		// spiffe-helper writes to path.Join(cert_dir, jwt_svid_file_name) (pkg/disk.WriteJWTSVID).
		assert.Equal(t, "/shared/jwt_svid.token", path.Join(c.CertDir, c.JWTSVIDs[0].JWTSVIDFilename))
		assert.Equal(t, 0o640, c.JWTSVIDFileMode)
		assert.True(t, *c.DaemonMode)
		assert.True(t, c.HealthCheck.ListenerEnabled)
		assert.Equal(t, 15127, c.HealthCheck.BindPort)
		assert.Equal(t, "/ready", c.HealthCheck.ReadinessPath)
		sc := helperconfig.NewSidecarConfig(c, logrus.New())
		assert.Equal(t, "/run/spire/agent-sockets/agent.sock", sc.AgentAddress)
	})
	t.Run("values that need quoting", func(t *testing.T) {
		c := parseWithSpiffeHelper(t, authconfig.RenderHelperConf(odd, authconfig.HelperOptions{CertDir: "/shared", FileMode: 0o640}))
		assert.Equal(t, odd.Spiffe.SocketPath, c.AgentAddress)
		assert.Equal(t, odd.Spiffe.Audience, c.JWTSVIDs[0].JWTAudience)
		assert.False(t, c.HealthCheck.ListenerEnabled)
	})
}

// TestClientNameAgreesWithAdmission holds the data plane's client-name substitution to the
// answers of the TokenExchange API's own (api/v1alpha1): whatever admission rejects, the data
// plane rejects; whatever the data plane accepts, admission accepts and renders the same.
func TestClientNameAgreesWithAdmission(t *testing.T) {
	w := workload()
	vars := v1alpha1.ClientNameVars{PodName: w.PodName, Namespace: w.Namespace, WorkloadName: w.Name, ServiceAccount: w.ServiceAccount}
	for _, tmpl := range []string{
		"{{.Namespace}}/{{.WorkloadName}}", "agent-{{.PodName}}", "{{ .ServiceAccount }}", "{{  .PodName}}-x",
		"plain", "a.b_c-d/e:f@g", "ünïcode", "{{.Secret}}", "{{.PodName", "{{.PodName}}}", "{.PodName}", "}",
		"{{printf \"%s\" .PodName}}", "{{$x := 1}}", "{{.}}", "{{ . PodName}}", "{{.Pod.Name}}", "a b", "a\tb", "tab\x7f",
		"", "{{}}", "{{ }}", "{{-.PodName-}}", "{{/* c */}}",
	} {
		name, err := authconfig.RenderClientName(tmpl, w)
		admissionErr := v1alpha1.ValidateClientNameTemplate(tmpl)
		if admissionErr != nil {
			assert.Error(t, err, "admission rejects %q (%v); the data plane must too", tmpl, admissionErr)
			continue
		}
		if err != nil {
			continue // stricter than admission is allowed (v1alpha1's grammar may be wider while its change lands)
		}
		want, rerr := v1alpha1.RenderClientName(tmpl, vars)
		require.NoError(t, rerr, tmpl)
		assert.Equal(t, want, name, tmpl)
	}
}

// TestContentHashAgreesWithController: the hash a role reports for the files it loaded is the
// kagenti.io/content-hash the controller wrote on the ConfigMap.
func TestContentHashAgreesWithController(t *testing.T) {
	cm := &corev1.ConfigMap{Data: map[string]string{"config.yaml": "inbound:\n  port: 9090\n", "other": "x"}}
	files := map[string][]byte{}
	for k, v := range cm.Data {
		files[k] = []byte(v)
	}
	assert.Equal(t, kit.ContentHash(cm), authconfig.ContentHash(files))
	assert.Empty(t, authconfig.ContentHash(nil), "no ConfigMap mounted: no hash")
}
