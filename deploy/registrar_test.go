package deploy_test

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRegistrarInstallRendersWhatTheControllerReads: helm's tokenexchange.registrar renders a
// controller that kagenti-tokenexchange's own flag parser accepts (<args> --help fails on an
// unknown flag), whose --registrar-spiffe-socket is in the mounted SPIRE socket directory (CSI
// driver or hostPath, read-only), and nothing of it when the registrar is off (the default).
func TestRegistrarInstallRendersWhatTheControllerReads(t *testing.T) {
	helm := tool(t, "helm")
	chart := filepath.Join(repoRoot(), "deploy", "helm", "kagenti")
	bin := filepath.Join(t.TempDir(), "kagenti-tokenexchange")
	cmd := exec.Command("go", "build", "-o", bin, "./tokenexchange/cmd/kagenti-tokenexchange")
	cmd.Dir = repoRoot()
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build: %s", out)

	for name, sets := range map[string][]string{
		"off":      nil,
		"csi":      {"tokenexchange.registrar.enabled=true"},
		"hostPath": {"tokenexchange.registrar.enabled=true", "tokenexchange.registrar.spiffeSocket.type=hostPath"},
	} {
		t.Run(name, func(t *testing.T) {
			args := []string{"template", "kagenti", chart, "--namespace", "kagenti-system"}
			for _, s := range sets {
				args = append(args, "--set", s)
			}
			d, ctlArgs := deploymentPod(t, render(t, helm, args...), "kagenti-tokenexchange")
			out, err := exec.Command(bin, append(ctlArgs, "--help")...).CombinedOutput()
			require.NoError(t, err, "kagenti-tokenexchange refuses the rendered arguments %q: %s", ctlArgs, out)
			socket := flagValue(ctlArgs, "--registrar-spiffe-socket")
			if name == "off" {
				assert.Empty(t, socket)
				for _, v := range d.Spec.Template.Spec.Volumes {
					assert.NotEqual(t, "spire-agent-socket", v.Name)
				}
				return
			}
			require.True(t, strings.HasPrefix(socket, "unix:///"), "--registrar-spiffe-socket=%q", socket)
			dir := filepath.Dir(strings.TrimPrefix(socket, "unix://"))
			var mount string
			for _, m := range d.Spec.Template.Spec.Containers[0].VolumeMounts {
				if m.MountPath == dir {
					mount = m.Name
					assert.True(t, m.ReadOnly, "the socket directory is mounted read-only")
				}
			}
			require.NotEmpty(t, mount, "%s is not mounted", dir)
			for _, v := range d.Spec.Template.Spec.Volumes {
				if v.Name != mount {
					continue
				}
				if name == "hostPath" {
					require.NotNil(t, v.HostPath)
					assert.Equal(t, "/run/spire/agent-sockets", v.HostPath.Path)
				} else {
					require.NotNil(t, v.CSI)
					assert.Equal(t, "csi.spiffe.io", v.CSI.Driver)
				}
			}
		})
	}
}
