package deploy_test

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
)

// TestAttestedFetchInstallRendersWhatAgentcardReads: agentcard.attestedFetch.enabled renders
// --fetch-spiffe-socket, which agentcard's own flag parser accepts, pointing into the SPIRE agent's
// socket directory mounted read-only from the CSI driver or a hostPath; with a federation over the
// same socket in the same pod the directory is mounted once, and two different sockets are refused.
func TestAttestedFetchInstallRendersWhatAgentcardReads(t *testing.T) {
	bin := buildAgentcard(t, "kagenti-agentcard")
	helm := tool(t, "helm")
	chart := filepath.Join(repoRoot(), "deploy", "helm", "kagenti")
	args := func(sets ...string) []string {
		a := []string{"template", "kagenti", chart, "--namespace", "kagenti-system", "--set", "agentcard.enabled=true", "--set", "agentcard.attestedFetch.enabled=true"}
		for _, s := range sets {
			a = append(a, "--set", s)
		}
		return a
	}
	for name, sets := range map[string][]string{
		"csi":                   nil,
		"hostPath":              {"agentcard.attestedFetch.spiffeSocket.type=hostPath"},
		"with a federation hub": {"agentcard.federation.mode=hub"},
	} {
		t.Run(name, func(t *testing.T) {
			d, argv := agentcardPod(t, render(t, helm, args(sets...)...))
			out, err := exec.Command(bin, append(argv, "--help")...).CombinedOutput()
			require.NoError(t, err, "kagenti-agentcard refuses the rendered arguments %q: %s", argv, out)

			socket := flagValue(argv, "--fetch-spiffe-socket")
			require.Equal(t, "unix:///run/spire/agent-sockets/agent.sock", socket)
			pod := d.Spec.Template.Spec
			var mount *corev1.VolumeMount
			for i, m := range pod.Containers[0].VolumeMounts {
				if m.MountPath == filepath.Dir(strings.TrimPrefix(socket, "unix://")) {
					require.Nil(t, mount, "the socket's directory is mounted once")
					mount = &pod.Containers[0].VolumeMounts[i]
				}
			}
			require.NotNil(t, mount, "the socket's directory is mounted")
			assert.True(t, mount.ReadOnly)
			var volume *corev1.Volume
			for i, v := range pod.Volumes {
				if v.Name == mount.Name {
					require.Nil(t, volume, "volume %s is defined once", v.Name)
					volume = &pod.Volumes[i]
				}
			}
			require.NotNil(t, volume, "mount %s has no volume", mount.Name)
			if name == "hostPath" {
				require.NotNil(t, volume.HostPath)
				assert.Equal(t, "/run/spire/agent-sockets", volume.HostPath.Path)
			} else {
				require.NotNil(t, volume.CSI)
				assert.Equal(t, "csi.spiffe.io", volume.CSI.Driver)
			}
			if name == "with a federation hub" {
				assert.Equal(t, socket, flagValue(argv, "--federation-spiffe-socket"), "one socket for both")
			}
		})
	}

	t.Run("a federation over another socket is refused", func(t *testing.T) {
		out, err := exec.Command(helm, args("agentcard.federation.mode=hub", "agentcard.federation.spiffeSocket.type=hostPath")...).CombinedOutput()
		require.Error(t, err)
		assert.Contains(t, string(out), "agentcard.attestedFetch.spiffeSocket and agentcard.federation.spiffeSocket name different sockets")
	})
	t.Run("an unknown socket type is refused, naming the value", func(t *testing.T) {
		out, err := exec.Command(helm, args("agentcard.attestedFetch.spiffeSocket.type=nfs")...).CombinedOutput()
		require.Error(t, err)
		assert.Contains(t, string(out), `agentcard.attestedFetch.spiffeSocket.type: "nfs" is neither csi nor hostPath`)
	})
}
