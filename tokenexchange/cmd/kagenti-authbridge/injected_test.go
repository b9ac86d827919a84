package main

// The injector (another module, which may not import this one) starts every identity container of
// a pod. These tests hold what it writes, its golden pod specs, to what this binary and
// spiffe-helper read: each kagenti-authbridge container's arguments parse, every variable it gets
// is one the binary reads, the configuration they make resolves, the files it reads are mounted,
// and the helper.conf proxy-init writes is read by spiffe-helper's own parser as the files
// spiffe-helper's container has.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	helperconfig "github.com/spiffe/spiffe-helper/cmd/spiffe-helper/config"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/kagenti/platform/pkg/configmap"
	"github.com/kagenti/platform/pkg/configmap/contract"
	"github.com/kagenti/platform/tokenexchange/internal/authbridge/sidecar"
	"github.com/kagenti/platform/tokenexchange/internal/authbridge/tracing"
	"github.com/kagenti/platform/tokenexchange/internal/authconfig"
)

// injectorGoldens are the injector's golden pod specs, relative to this package;
// $KAGENTI_INJECTOR_GOLDENS points the tests at another directory of them (another worktree's).
func injectorGoldens() string {
	return envOr("KAGENTI_INJECTOR_GOLDENS", "../../../injector/internal/inject/testdata/golden")
}

// A fake pod's downward-API values.
const (
	fakePodName   = "weather-agent-7d9f-abcde"
	fakeNamespace = "agents"
)

// The variables the binary reads besides authconfig.EnvNames (its flags' defaults).
var flagEnv = []string{"KAGENTI_CONFIG_DIR", "KAGENTI_SHARED_DIR", "KAGENTI_IDP_CREDENTIALS_DIR", "KAGENTI_IDENTITY_DIR"}

// goldenTemplate reads a golden workload and returns its pod template.
func goldenTemplate(t *testing.T, file string) corev1.PodTemplateSpec {
	t.Helper()
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	var w struct {
		Kind string `json:"kind"`
		Spec struct {
			Template    *corev1.PodTemplateSpec `json:"template"`
			JobTemplate *struct {
				Spec struct {
					Template corev1.PodTemplateSpec `json:"template"`
				} `json:"spec"`
			} `json:"jobTemplate"`
		} `json:"spec"`
	}
	require.NoError(t, yaml.Unmarshal(b, &w))
	if w.Spec.JobTemplate != nil {
		return w.Spec.JobTemplate.Spec.Template
	}
	require.NotNil(t, w.Spec.Template, file)
	return *w.Spec.Template
}

func goldenFiles(t *testing.T) []string {
	files, err := filepath.Glob(filepath.Join(injectorGoldens(), "*.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, files, "the injector's golden files moved: update injectorGoldens")
	return files
}

func isAuthbridge(c corev1.Container) bool {
	return strings.Contains(c.Image, "/kagenti-authbridge:") || strings.Contains(c.Image, "/kagenti-authbridge@")
}

// fieldValue resolves a downward-API field of a fake pod of tmpl, as the kubelet would.
func fieldValue(t *testing.T, tmpl corev1.PodTemplateSpec, fieldPath string) string {
	t.Helper()
	if key, ok := strings.CutPrefix(fieldPath, "metadata.annotations['"); ok {
		v, found := tmpl.Annotations[strings.TrimSuffix(key, "']")]
		require.True(t, found, "the pod has no annotation for %s", fieldPath)
		return v
	}
	sa := tmpl.Spec.ServiceAccountName
	if sa == "" {
		sa = "default" // the API server's ServiceAccount admission
	}
	v := map[string]string{"metadata.name": fakePodName, "metadata.namespace": fakeNamespace, "spec.serviceAccountName": sa}[fieldPath]
	require.NotEmpty(t, v, "field %s", fieldPath)
	return v
}

// setContainerEnv makes the test process's environment the container's: every variable the
// binary reads is cleared, then the container's are set, and its volumes projected as the kubelet
// would for a fake pod (the identity volume into a temporary directory the binary is pointed at,
// as its identity and its configuration directory: the volume projects the optional ConfigMap,
// which does not exist here, beside the downward-API files).
func setContainerEnv(t *testing.T, tmpl corev1.PodTemplateSpec, c corev1.Container) {
	t.Helper()
	for _, n := range append(authconfig.EnvNames(), flagEnv...) {
		t.Setenv(n, "")
	}
	vol, _ := mountOf(c, authconfig.IdentityDir)
	if vol != "" {
		require.Equal(t, contract.VolumeIdentity, vol)
		dir := t.TempDir()
		for _, item := range identityItems(t, tmpl) {
			require.NotNil(t, item.FieldRef)
			require.NoError(t, os.WriteFile(filepath.Join(dir, item.Path), []byte(fieldValue(t, tmpl, item.FieldRef.FieldPath)), 0o644))
		}
		t.Setenv("KAGENTI_IDENTITY_DIR", dir)
		t.Setenv("KAGENTI_CONFIG_DIR", dir)
	}
	known := append(authconfig.EnvNames(), flagEnv...)
	require.Empty(t, c.EnvFrom, "%s: envFrom is not followed by this test", c.Name)
	for _, e := range c.Env {
		require.Contains(t, known, e.Name, "%s: %s is read by no program", c.Name, e.Name)
		v := e.Value
		if e.ValueFrom != nil {
			require.NotNil(t, e.ValueFrom.FieldRef, "%s: %s", c.Name, e.Name)
			v = fieldValue(t, tmpl, e.ValueFrom.FieldRef.FieldPath)
		}
		t.Setenv(e.Name, v)
	}
}

// identityVolume returns tmpl's identity volume: projected, of the downward API's files and the
// optional ConfigMap {workload}-token-exchange.
func identityVolume(t *testing.T, tmpl corev1.PodTemplateSpec) *corev1.ProjectedVolumeSource {
	t.Helper()
	i := slices.IndexFunc(tmpl.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == contract.VolumeIdentity })
	require.GreaterOrEqual(t, i, 0)
	p := tmpl.Spec.Volumes[i].Projected
	require.NotNil(t, p, "the identity volume is a projected volume")
	return p
}

// identityItems returns the downward-API files of tmpl's identity volume.
func identityItems(t *testing.T, tmpl corev1.PodTemplateSpec) []corev1.DownwardAPIVolumeFile {
	t.Helper()
	var items []corev1.DownwardAPIVolumeFile
	for _, src := range identityVolume(t, tmpl).Sources {
		if src.DownwardAPI != nil {
			items = append(items, src.DownwardAPI.Items...)
		}
	}
	require.NotEmpty(t, items)
	return items
}

// mountOf returns the volume mounted at the directory holding p in c, "" when none.
func mountOf(c corev1.Container, p string) (volume string, readOnly bool) {
	best := ""
	for _, m := range c.VolumeMounts {
		if (p == m.MountPath || strings.HasPrefix(p, strings.TrimSuffix(m.MountPath, "/")+"/")) && len(m.MountPath) > len(best) {
			best, volume, readOnly = m.MountPath, m.Name, m.ReadOnly
		}
	}
	return volume, readOnly
}

// readOnlyMount reports whether the container sees p read-only: its mount says so, or the volume
// is one the kubelet always mounts read-only (configMap, secret, downwardAPI, projected, since
// Kubernetes 1.10), for which the injector leaves readOnly out.
func readOnlyMount(tmpl corev1.PodTemplateSpec, c corev1.Container, p string) bool {
	vol, ro := mountOf(c, p)
	i := slices.IndexFunc(tmpl.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == vol })
	if ro || i < 0 {
		return ro
	}
	v := tmpl.Spec.Volumes[i]
	return v.ConfigMap != nil || v.Secret != nil || v.DownwardAPI != nil || v.Projected != nil
}

func containers(tmpl corev1.PodTemplateSpec) []corev1.Container {
	return slices.Concat(tmpl.Spec.InitContainers, tmpl.Spec.Containers)
}

// authbridgeComponents returns the components a kagenti-authbridge container of the injector runs,
// after checking its arguments name them: a container named after its component runs that
// component's role (contract.AuthbridgeRoles); the combined container (contract.ContainerAuthbridge)
// runs `sidecar <role>...`, valid roles each once, in the order the sidecar starts them.
func authbridgeComponents(t *testing.T, c corev1.Container) []string {
	t.Helper()
	require.NotEmpty(t, c.Args)
	if c.Name != contract.ContainerAuthbridge {
		require.Equal(t, contract.AuthbridgeRoles[c.Name], c.Args[0], "the component's role")
		return []string{c.Name}
	}
	require.Equal(t, contract.AuthbridgeSidecarCommand, c.Args[0], "the combined container runs the sidecar command")
	var roles []string
	for _, a := range c.Args[1:] {
		if strings.HasPrefix(a, "-") {
			break
		}
		roles = append(roles, a)
	}
	parsed, err := parseRoles(roles)
	require.NoError(t, err, "the sidecar's roles")
	require.Equal(t, parsed, roles, "the roles in the order they start")
	components := contract.ComponentsOfContainer(c.Name, c.Args)
	require.Len(t, components, len(roles), "every role is a component")
	return components
}

func TestInjectedContainersAreWhatTheBinaryReads(t *testing.T) {
	components := map[string]bool{}
	for _, file := range goldenFiles(t) {
		tmpl := goldenTemplate(t, file)
		for _, c := range containers(tmpl) {
			if !isAuthbridge(c) {
				continue
			}
			t.Run(filepath.Base(file)+"/"+c.Name, func(t *testing.T) {
				runs := authbridgeComponents(t, c)
				for _, component := range runs {
					components[component] = true
				}
				require.Empty(t, c.Command, "the image's entrypoint is the binary")
				setContainerEnv(t, tmpl, c)

				root := newRootCommand()
				cmd, rest, err := root.Find(c.Args)
				require.NoError(t, err)
				require.Equal(t, c.Args[0], cmd.Name())
				require.NoError(t, cmd.ParseFlags(rest), "the injected arguments parse")
				if c.Name == contract.ContainerAuthbridge {
					require.NoError(t, cmd.Args(cmd, cmd.Flags().Args()), "the roles")
					// The kubelet's probes ask the aggregate status server.
					probes := probesOf(c)
					require.NotEmpty(t, probes, "the combined container has probes")
					require.NotContains(t, probes, "liveness", "a role's fatal error ends the process: no liveness probe")
					for kind, p := range probes {
						require.NotNil(t, p.HTTPGet, kind)
						assert.Equal(t, contract.StatusPortAuthbridge, p.HTTPGet.Port.IntValue(), "%s probe port", kind)
						assert.Equal(t, "/readyz", p.HTTPGet.Path, "%s probe path", kind)
					}
				} else {
					require.Empty(t, cmd.Flags().Args(), "no positional arguments")
				}

				// The configuration the environment makes resolves (no ConfigMap yet).
				src, err := sidecar.SourceFromEnv(os.Getenv("KAGENTI_CONFIG_DIR"), os.Getenv("KAGENTI_IDENTITY_DIR"))
				require.NoError(t, err)
				snap, err := src.Load()
				require.NoError(t, err, "the injector's defaults must resolve on their own")
				assert.Empty(t, snap.ContentHash, "the identity files are no ConfigMap content")
				assert.Equal(t, fakeNamespace, snap.Config.Workload.Namespace)
				assert.NotEmpty(t, snap.Config.Workload.Name)
				// The pod's name: projected when the hostname is not the name, else the hostname.
				wantPodName, err := os.Hostname()
				require.NoError(t, err)
				if slices.ContainsFunc(identityItems(t, tmpl), func(i corev1.DownwardAPIVolumeFile) bool { return i.Path == authconfig.EnvPodName }) {
					wantPodName = fakePodName
				}
				assert.Equal(t, wantPodName, snap.Config.Workload.PodName)
				assert.NotEmpty(t, snap.Config.Workload.ServiceAccount)

				// The user's probes the injector rewrote are served by this binary's status server:
				// each rewritten path names a probe the identity defaults hand it (not a 404).
				if c.Name == contract.ContainerAuthbridge {
					status := httptest.NewServer(aggregateHandler(nil, src.AppProbes))
					defer status.Close()
					served := 0
					for _, uc := range containers(tmpl) {
						for kind, p := range probesOf(uc) {
							if p.HTTPGet == nil || !strings.HasPrefix(p.HTTPGet.Path, contract.AppProbePathPrefix) {
								continue
							}
							served++
							assert.Equal(t, contract.StatusPortAuthbridge, p.HTTPGet.Port.IntValue(), "%s/%s", uc.Name, kind)
							resp, err := status.Client().Get(status.URL + p.HTTPGet.Path)
							require.NoError(t, err)
							_ = resp.Body.Close()
							assert.NotEqual(t, http.StatusNotFound, resp.StatusCode, "%s/%s: %s is served", uc.Name, kind, p.HTTPGet.Path)
						}
					}
					assert.Len(t, src.AppProbes, served, "every recorded probe is one the template GETs")
				}

				// The files it reads are where the injector mounts them: config.yaml of the
				// workload's ConfigMap in the identity volume, beside the defaults.
				vol, _ := mountOf(c, authconfig.ConfigDir)
				assert.Equal(t, contract.VolumeIdentity, vol, "config.yaml")
				assert.True(t, readOnlyMount(tmpl, c, authconfig.ConfigDir))
				var configMaps []string
				for _, src := range identityVolume(t, tmpl).Sources {
					if src.ConfigMap != nil {
						configMaps = append(configMaps, src.ConfigMap.Name)
						assert.True(t, *src.ConfigMap.Optional, "no TokenExchange, no ConfigMap: the pod starts on the defaults")
						assert.Empty(t, src.ConfigMap.Items, "every key (config.yaml) is projected")
					}
				}
				assert.Equal(t, []string{configmap.TokenExchangeName(snap.Config.Workload.Name)}, configMaps)
				// The proxies export spans where the AgentTrace points: the directory the binary
				// reads (--trace-dir, as parsed from the injected arguments) is the trace volume.
				if slices.Contains(runs, contract.ComponentAuthProxy) || slices.Contains(runs, contract.ComponentEnvoyProxy) {
					traceDir := cmd.Flags().Lookup("trace-dir").Value.String()
					vol, _ = mountOf(c, filepath.Join(traceDir, tracing.FileEndpoint))
					assert.Equal(t, contract.VolumeTrace, vol, "the trace files")
					assert.True(t, readOnlyMount(tmpl, c, traceDir))
				}
				spiffeHelper := slices.ContainsFunc(containers(tmpl), func(c corev1.Container) bool { return c.Name == contract.ComponentSpiffeHelper })
				for _, component := range runs {
					switch {
					case component == contract.ComponentProxyInit && !spiffeHelper:
						vol, _ = mountOf(c, authconfig.SharedDir)
						assert.Empty(t, vol, "without spiffe-helper, proxy-init writes nothing to the shared volume")
					case component == contract.ComponentProxyInit, component == contract.ComponentClientRegistration:
						vol, _ = mountOf(c, authconfig.SharedDir)
						assert.Equal(t, contract.VolumeShared, vol, "%s writes the shared volume", component)
						assert.False(t, readOnlyMount(tmpl, c, authconfig.SharedDir))
					case component == contract.ComponentEnvoyProxy:
						vol, _ = mountOf(c, authconfig.SharedDir)
						assert.Equal(t, contract.VolumeShared, vol, "it reads the client credentials")
					}
					if component == contract.ComponentClientRegistration {
						vol, _ = mountOf(c, authconfig.IdPCredentialsDir)
						assert.Equal(t, contract.VolumeIdPCredentials, vol)
						assert.True(t, readOnlyMount(tmpl, c, authconfig.IdPCredentialsDir))
					}
				}
				// The proxies' traffic is never redirected to themselves: they run as the proxy UID.
				if c.Name != contract.ComponentProxyInit {
					require.NotNil(t, c.SecurityContext)
					assert.Equal(t, snap.Config.Outbound.Interception.ProxyUID, *c.SecurityContext.RunAsUser)
				}
			})
		}
	}
	require.Len(t, components, len(contract.AuthbridgeRoles), "every role appears in the injector's goldens: %v", components)
}

// TestInjectedHelperConfIsReadBySpiffeHelper runs proxy-init as injected (dry run) and parses the
// helper.conf it writes with spiffe-helper v0.11.0's own configuration package, then checks the
// paths against the spiffe-helper container next to it.
func TestInjectedHelperConfIsReadBySpiffeHelper(t *testing.T) {
	var seen int
	for _, file := range goldenFiles(t) {
		tmpl := goldenTemplate(t, file)
		all := containers(tmpl)
		i := slices.IndexFunc(all, func(c corev1.Container) bool { return c.Name == contract.ComponentSpiffeHelper })
		if i < 0 {
			continue
		}
		helper := all[i]
		seen++
		t.Run(filepath.Base(file), func(t *testing.T) {
			j := slices.IndexFunc(all, func(c corev1.Container) bool { return c.Name == contract.ComponentProxyInit })
			require.GreaterOrEqual(t, j, 0, "spiffe-helper needs proxy-init, which writes its configuration")
			require.Less(t, j, i, "proxy-init runs before spiffe-helper starts")
			init := all[j]
			setContainerEnv(t, tmpl, init)

			root := newRootCommand()
			var out bytes.Buffer
			root.SetOut(&out)
			root.SetArgs(append(slices.Clone(init.Args), "--dry-run"))
			require.NoError(t, root.Execute())

			text := out.String()
			head := "wrote " + contract.PathHelperConf + ":\n"
			k := strings.Index(text, head)
			require.GreaterOrEqual(t, k, 0, "proxy-init writes helper.conf where spiffe-helper reads it:\n%s", text)
			conf := text[k+len(head):]
			for _, end := range []string{"would install:", "traffic interception skipped"} {
				if e := strings.Index(conf, end); e >= 0 {
					conf = conf[:e]
				}
			}
			confFile := filepath.Join(t.TempDir(), "helper.conf")
			require.NoError(t, os.WriteFile(confFile, []byte(conf), 0o600))
			hc, err := helperconfig.ParseConfig(confFile, true, "daemon-mode")
			require.NoError(t, err, conf)
			log := logrus.New()
			log.SetOutput(io.Discard)
			require.NoError(t, hc.ValidateConfig(log), conf)

			require.Equal(t, []string{"-config", contract.PathHelperConf}, helper.Args, "spiffe-helper reads the file proxy-init writes")
			vol, _ := mountOf(helper, contract.PathHelperConf)
			assert.Equal(t, contract.VolumeShared, vol)
			vol, _ = mountOf(init, contract.PathHelperConf)
			assert.Equal(t, contract.VolumeShared, vol)

			assert.NotContains(t, hc.AgentAddress, "://", "spiffe-helper adds unix:// itself")
			vol, _ = mountOf(helper, hc.AgentAddress)
			assert.Equal(t, contract.VolumeSpireSocket, vol, "the agent socket %s is in the SPIRE socket volume", hc.AgentAddress)
			require.Len(t, hc.JWTSVIDs, 1)
			svid := path.Join(hc.CertDir, hc.JWTSVIDs[0].JWTSVIDFilename) // as spiffe-helper's pkg/disk joins them
			assert.Equal(t, path.Join(authconfig.SharedDir, authconfig.JWTSVIDFile), svid)
			vol, ro := mountOf(helper, svid)
			assert.Equal(t, contract.VolumeShared, vol)
			assert.False(t, ro, "spiffe-helper writes the SVID")
			assert.Equal(t, authconfig.DefaultHelperFileMode, hc.JWTSVIDFileMode)
			assert.Equal(t, contract.HealthPortSpiffeHelper, hc.HealthCheck.BindPort)

			// Its probes GET the paths and the port its health listener serves with this file.
			require.True(t, hc.HealthCheck.ListenerEnabled, "spiffe-helper's probes need its health listener")
			paths := map[string]string{"liveness": hc.HealthCheck.LivenessPath, "readiness": hc.HealthCheck.ReadinessPath, "startup": hc.HealthCheck.ReadinessPath}
			probes := probesOf(helper)
			require.NotEmpty(t, probes, "spiffe-helper has probes")
			for kind, p := range probes {
				require.NotNil(t, p.HTTPGet, kind)
				assert.Equal(t, paths[kind], p.HTTPGet.Path, "%s probe path", kind)
				assert.Equal(t, hc.HealthCheck.BindPort, p.HTTPGet.Port.IntValue(), "%s probe port", kind)
			}
		})
	}
	require.NotZero(t, seen, "no golden injects spiffe-helper")
}

// The ports and paths both sides must agree on (pkg/configmap is the injector's source).
func TestContractWithTheInjector(t *testing.T) {
	assert.Equal(t, contract.StatusPortRegister, registerAdminPort)
	assert.Equal(t, contract.StatusPortInbound, inboundAdminPort)
	assert.Equal(t, contract.StatusPortOutbound, outboundAdminPort)
	assert.Equal(t, contract.HealthPortSpiffeHelper, spiffeHelperHealthPort)
	assert.Equal(t, contract.PathIdentity, authconfig.ConfigDir)
	assert.Equal(t, contract.PathTokenExchange, authconfig.LegacyConfigDir)
	assert.Equal(t, contract.PathShared, authconfig.SharedDir)
	assert.Equal(t, contract.PathIdPCredentials, authconfig.IdPCredentialsDir)
	assert.Equal(t, contract.PathIdentity, authconfig.IdentityDir)
	assert.Equal(t, contract.IdentityDefaultsFile, authconfig.IdentityDefaultsFile)
	assert.Equal(t, contract.PathHelperConf, path.Join(authconfig.SharedDir, authconfig.HelperConfFile))
	assert.Equal(t, contract.StatusPortAuthbridge, sidecarStatusPort)
	root := newRootCommand()
	cmd, _, err := root.Find([]string{contract.AuthbridgeSidecarCommand})
	require.NoError(t, err)
	assert.Equal(t, contract.AuthbridgeSidecarCommand, cmd.Name())
	for _, role := range contract.SidecarRoles {
		assert.Contains(t, slices.Collect(maps.Values(contract.AuthbridgeRoles)), role)
	}
	for _, role := range contract.AuthbridgeRoles {
		cmd, _, err := root.Find([]string{role})
		require.NoError(t, err)
		assert.Equal(t, role, cmd.Name())
	}
}

// componentStatusPort is each role's own status port, by component.
var componentStatusPort = map[string]int{
	contract.ComponentClientRegistration: registerAdminPort,
	contract.ComponentAuthProxy:          inboundAdminPort,
	contract.ComponentEnvoyProxy:         outboundAdminPort,
}

// probesOf returns c's probes by kind.
func probesOf(c corev1.Container) map[string]*corev1.Probe {
	out := map[string]*corev1.Probe{}
	for kind, p := range map[string]*corev1.Probe{"startup": c.StartupProbe, "readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		if p != nil {
			out[kind] = p
		}
	}
	return out
}

// TestInjectedProbesAreServed starts each kagenti-authbridge sidecar of the injector's goldens with
// the golden's arguments and environment and GETs every probe's path on its port, as the kubelet
// would: the liveness path answers 200, the startup and readiness paths are the role's readiness
// (200 when its /status says ready, else 503 with the reasons; here, without an identity provider,
// mostly 503), never a 404 or a closed port. The status ports are fixed, so the test runs again in a
// network namespace of its own (root, or an unprivileged user namespace).
func TestInjectedProbesAreServed(t *testing.T) {
	if os.Getenv(testbedEnv) != "probes" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestInjectedProbesAreServed$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), testbedEnv+"=probes")
		cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET, Pdeathsig: syscall.SIGKILL}
		if os.Geteuid() != 0 {
			cmd.SysProcAttr.Cloneflags |= syscall.CLONE_NEWUSER
			cmd.SysProcAttr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Geteuid(), Size: 1}}
			cmd.SysProcAttr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getegid(), Size: 1}}
		}
		out, err := cmd.CombinedOutput()
		var start *os.PathError
		if errors.As(err, &start) || (err != nil && strings.Contains(err.Error(), "operation not permitted")) {
			t.Skipf("no network namespace for the fixed status ports: %v", err)
		}
		t.Logf("in its own network namespace:\n%s", out)
		require.NoError(t, err, "output above")
		return
	}
	if out, err := exec.Command("ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Skipf("ip link set lo up: %v: %s", err, out)
	}
	client := &http.Client{Timeout: 3 * time.Second}
	get := func(port int, path string) (int, string, error) {
		resp, err := client.Get(fmt.Sprintf("http://127.0.0.1:%d%s", port, path))
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), err
	}
	checked := map[string]bool{}
	seen := map[string]bool{} // the same container in several goldens is started once
	for _, file := range goldenFiles(t) {
		tmpl := goldenTemplate(t, file)
		for _, c := range containers(tmpl) {
			probes := probesOf(c)
			if !isAuthbridge(c) || len(probes) == 0 {
				continue
			}
			key, err := json.Marshal(c)
			require.NoError(t, err)
			if seen[string(key)] {
				continue
			}
			seen[string(key)] = true
			t.Run(filepath.Base(file)+"/"+c.Name, func(t *testing.T) {
				setContainerEnv(t, tmpl, c)
				ctx, cancel := context.WithCancel(context.Background())
				root := newRootCommand()
				root.SetArgs(c.Args)
				root.SetOut(io.Discard)
				done := make(chan error, 1)
				go func() { done <- root.ExecuteContext(ctx) }()
				defer func() {
					cancel()
					select {
					case err := <-done:
						require.NoError(t, err, "the role stops cleanly")
					case <-time.After(30 * time.Second):
						t.Fatal("the role did not stop")
					}
				}()
				for kind, p := range probes {
					require.NotNil(t, p.HTTPGet, "%s probe: httpGet", kind)
					require.Contains(t, []corev1.URIScheme{"", corev1.URISchemeHTTP}, p.HTTPGet.Scheme)
					require.Empty(t, p.HTTPGet.Host, "the kubelet probes the pod IP")
					port := p.HTTPGet.Port.IntValue()
					require.NotZero(t, port, "%s probe: a numeric port", kind)
					var code int
					var body string
					require.Eventually(t, func() bool {
						select {
						case err := <-done:
							require.NoError(t, err, "the role exited")
							t.Fatal("the role exited")
						default:
						}
						code, body, err = get(port, p.HTTPGet.Path)
						return err == nil
					}, 20*time.Second, 50*time.Millisecond, "%s probe: nothing serves :%d", kind, port)
					if kind == "liveness" {
						assert.Equal(t, http.StatusOK, code, "%s probe %s on :%d: %s", kind, p.HTTPGet.Path, port, body)
						continue
					}
					if c.Name == contract.ContainerAuthbridge {
						// Startup and readiness: every role's, as each one's /status reports it.
						roleStatus := func() (allReady bool, why string) {
							allReady = true
							for _, component := range contract.ComponentsOfContainer(c.Name, c.Args) {
								scode, sbody, err := get(componentStatusPort[component], "/status")
								var st sidecar.Status
								if err != nil || scode != http.StatusOK || json.Unmarshal([]byte(sbody), &st) != nil || !st.Ready {
									allReady, why = false, why+component+" not ready; "
								}
							}
							return allReady, why
						}
						var ready bool
						var why string
						require.Eventually(t, func() bool {
							code, body, _ = get(port, p.HTTPGet.Path)
							ready, why = roleStatus()
							return (code == http.StatusOK) == ready
						}, 10*time.Second, 50*time.Millisecond, "%s probe %s on :%d answers %d %q, roles: %s", kind, p.HTTPGet.Path, port, code, body, why)
						for _, role := range c.Args[1:] {
							assert.Contains(t, body, role+": ", "the body names each role's state")
						}
						if !ready {
							assert.Equal(t, http.StatusServiceUnavailable, code)
						}
						t.Logf("%s probe %s on :%d: %d %s", kind, p.HTTPGet.Path, port, code, strings.TrimSpace(body))
						continue
					}
					// Startup and readiness: the role's readiness, as its /status reports it.
					scode, sbody, err := get(port, "/status")
					require.NoError(t, err)
					require.Equal(t, http.StatusOK, scode)
					var st sidecar.Status
					require.NoError(t, json.Unmarshal([]byte(sbody), &st))
					require.Equal(t, c.Args[0], st.Role, "the port is this role's status server")
					// Readiness may change between the two requests (keys loading): ask again until they agree.
					require.Eventually(t, func() bool {
						code, body, _ = get(port, p.HTTPGet.Path)
						_, sbody, _ = get(port, "/status")
						_ = json.Unmarshal([]byte(sbody), &st)
						return (code == http.StatusOK) == st.Ready
					}, 10*time.Second, 50*time.Millisecond, "%s probe %s on :%d answers %d %q, /status ready=%v", kind, p.HTTPGet.Path, port, code, body, st.Ready)
					if !st.Ready {
						assert.Equal(t, http.StatusServiceUnavailable, code)
						assert.NotEmpty(t, strings.TrimSpace(body), "a 503 says why")
					}
					t.Logf("%s probe %s on :%d: %d %s", kind, p.HTTPGet.Path, port, code, strings.TrimSpace(body))
				}
				if c.Name == contract.ContainerAuthbridge {
					for _, role := range c.Args[1:] {
						checked[role] = true
					}
				} else {
					checked[c.Args[0]] = true
				}
			})
		}
	}
	for _, role := range []string{"register", "inbound", "outbound"} {
		assert.True(t, checked[role], "no golden has probes on the %s role", role)
	}
}

// proxy-init as injected without spiffe-helper has no shared volume: it writes nothing there, and
// starts without the directory (its dry run, here, with no /shared on this machine). config.yaml
// cannot turn spiffe on in such a pod (the configuration is rejected, the injector's defaults
// apply): proxy-init never tries to write helper.conf without the shared volume, which would fail
// the pod on its read-only root.
func TestInjectedInitWithoutSharedVolume(t *testing.T) {
	var seen int
	for _, file := range goldenFiles(t) {
		tmpl := goldenTemplate(t, file)
		all := containers(tmpl)
		j := slices.IndexFunc(all, func(c corev1.Container) bool { return c.Name == contract.ComponentProxyInit })
		if j < 0 || slices.ContainsFunc(all, func(c corev1.Container) bool { return c.Name == contract.ComponentSpiffeHelper }) {
			continue
		}
		init := all[j]
		seen++
		t.Run(filepath.Base(file), func(t *testing.T) {
			vol, _ := mountOf(init, contract.PathHelperConf)
			require.Empty(t, vol, "no shared volume without spiffe-helper")
			_, err := os.Stat(authconfig.SharedDir)
			require.ErrorIs(t, err, os.ErrNotExist, "this test needs a machine without %s", authconfig.SharedDir)
			setContainerEnv(t, tmpl, init)
			root := newRootCommand()
			var out bytes.Buffer
			root.SetOut(&out)
			root.SetArgs(append(slices.Clone(init.Args), "--dry-run"))
			require.NoError(t, root.Execute())
			require.NotContains(t, out.String(), "helper.conf", "nothing is written to the shared volume")
		})
	}
	require.NotZero(t, seen, "no golden injects proxy-init without spiffe-helper")

	t.Run("spiffe on through config.yaml", func(t *testing.T) {
		for _, n := range append(authconfig.EnvNames(), flagEnv...) {
			t.Setenv(n, "")
		}
		t.Setenv("KAGENTI_IDENTITY_DIR", t.TempDir())
		t.Setenv("POD_NAMESPACE", fakeNamespace)
		t.Setenv("KAGENTI_WORKLOAD", "weather-agent")
		cfgDir := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(cfgDir, authconfig.ConfigFile), []byte("spiffe: {enabled: true}\n"), 0o644))
		helperConf := filepath.Join(t.TempDir(), "not-mounted", authconfig.HelperConfFile)
		root := newRootCommand()
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetArgs([]string{"init", "--intercept=false", "--config-dir", cfgDir, "--helper-conf", helperConf})
		require.NoError(t, root.Execute(), "the pod starts")
		require.Contains(t, out.String(), "config.yaml rejected, the injector's defaults apply")
		require.Contains(t, out.String(), "spiffe.enabled: true cannot take effect: the injector did not put spiffe-helper into this pod")
		require.NotContains(t, out.String(), "wrote")
		require.NoFileExists(t, helperConf)
	})
}
