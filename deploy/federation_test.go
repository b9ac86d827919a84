package deploy_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

const (
	hubSpiffeID    = "spiffe://hub.example/ns/kagenti-system/sa/kagenti-agentcard"
	memberSpiffeID = "spiffe://a.example/ns/kagenti-system/sa/kagenti-agentcard"
)

// federationInstalls are the ways to install agentcard as a federation hub or member: the kustomize
// overlays (components/agentcard-federation-*) and the helm values (agentcard.federation.*).
func federationInstalls(t *testing.T) map[string][]*unstructured.Unstructured {
	kubectl, helm := tool(t, "kubectl"), tool(t, "helm")
	chart := filepath.Join(repoRoot(), "deploy", "helm", "kagenti")
	helmWith := func(sets ...string) []*unstructured.Unstructured {
		args := []string{"template", "kagenti", chart, "--namespace", "kagenti-system", "--set", "agentcard.enabled=true"}
		for _, s := range sets {
			args = append(args, "--set", s)
		}
		return render(t, helm, args...)
	}
	member := []string{"agentcard.federation.mode=member", "agentcard.federation.clusterName=a",
		"agentcard.federation.hubAddress=hub.example.com:9443", "agentcard.federation.hubSpiffeID=" + hubSpiffeID}
	return map[string][]*unstructured.Unstructured{
		"kustomize hub":          render(t, kubectl, "kustomize", filepath.Join(repoRoot(), "deploy", "kustomize", "overlays", "agentcard-federation-hub")),
		"kustomize member":       render(t, kubectl, "kustomize", filepath.Join(repoRoot(), "deploy", "kustomize", "overlays", "agentcard-federation-member")),
		"helm hub":               helmWith("agentcard.federation.mode=hub", "agentcard.federation.clusterName=hub"),
		"helm hub hostPath":      helmWith("agentcard.federation.mode=hub", "agentcard.federation.spiffeSocket.type=hostPath"),
		"helm member":            helmWith(member...),
		"helm member certSecret": helmWith(append(member, "agentcard.federation.certSecret=agentcard-federation")...),
		"kustomize member-only":  render(t, kubectl, "kustomize", filepath.Join(repoRoot(), "deploy", "kustomize", "overlays", "agentcard-federation-member-only")),
		"helm member-only":       helmWith(append(member, "agentcard.federation.memberDeployment=true")...),
	}
}

// memberOnlyDeployment is the Deployment of the member agent alone, in the installs that run it
// apart from the controller.
const memberOnlyDeployment = "kagenti-agentcard-federation-member"

// federationPod is the rendered pod that runs the federation role of install name: the
// controller's, or the member agent's own Deployment.
func federationPod(t *testing.T, name string, objs []*unstructured.Unstructured) (*appsv1.Deployment, []string) {
	t.Helper()
	if strings.Contains(name, "member-only") {
		return deploymentPod(t, objs, memberOnlyDeployment)
	}
	return agentcardPod(t, objs)
}

// agentcardPod returns the rendered agentcard Deployment and its manager container's arguments with
// $(VAR) expanded as the kubelet expands them, from the rendered ConfigMaps the env refers to.
func agentcardPod(t *testing.T, objs []*unstructured.Unstructured) (*appsv1.Deployment, []string) {
	t.Helper()
	return deploymentPod(t, objs, "kagenti-agentcard")
}

// deploymentPod is agentcardPod for the Deployment named name.
func deploymentPod(t *testing.T, objs []*unstructured.Unstructured, name string) (*appsv1.Deployment, []string) {
	t.Helper()
	var d *appsv1.Deployment
	configMaps := map[string]map[string]string{}
	for _, o := range objs {
		switch {
		case o.GetKind() == "Deployment" && o.GetName() == name:
			d = &appsv1.Deployment{}
			require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, d))
		case o.GetKind() == "ConfigMap":
			cm := &corev1.ConfigMap{}
			require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, cm))
			configMaps[cm.Name] = cm.Data
		}
	}
	require.NotNil(t, d, "no Deployment %s rendered", name)
	c := d.Spec.Template.Spec.Containers[0]
	vars := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			vars[e.Name] = e.Value
		case e.ValueFrom.ConfigMapKeyRef != nil:
			ref := e.ValueFrom.ConfigMapKeyRef
			data, ok := configMaps[ref.Name]
			require.True(t, ok, "env %s refers to ConfigMap %s, which the install does not make", e.Name, ref.Name)
			v, ok := data[ref.Key]
			require.True(t, ok, "env %s refers to key %s, which ConfigMap %s does not have", e.Name, ref.Key, ref.Name)
			vars[e.Name] = v
		}
	}
	ref := regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)
	var args []string
	for _, a := range c.Args {
		args = append(args, ref.ReplaceAllStringFunc(a, func(m string) string {
			v, ok := vars[m[2:len(m)-1]]
			require.True(t, ok, "argument %q names %s, which the container's env does not set", a, m)
			return v
		}))
	}
	return d, args
}

// TestFederationInstallsRenderWhatAgentcardReads: every way to install a hub or a member renders a
// pod that agentcard accepts. Its own flag parser reads every argument (kagenti-agentcard <args>
// --help fails on an unknown flag or a bad value), each mount has a volume, the SPIFFE socket flag
// points into the mounted socket directory, and a hub's Service targets a port the container has.
func TestFederationInstallsRenderWhatAgentcardReads(t *testing.T) {
	bin, memberBin := buildAgentcard(t, "kagenti-agentcard"), buildAgentcard(t, memberOnlyDeployment)
	for name, objs := range federationInstalls(t) {
		t.Run(name, func(t *testing.T) {
			d, args := federationPod(t, name, objs)
			run, mode := bin, flagValue(args, "--federation")
			if strings.Contains(name, "member-only") {
				// The controller runs without federation; the member agent alone, its own binary
				// and image, with the controller's rights.
				ctl, ctlArgs := agentcardPod(t, objs)
				assert.Empty(t, flagValue(ctlArgs, "--federation"), "the controller of a member-only install runs no federation role")
				assert.Equal(t, "kagenti-agentcard", d.Spec.Template.Spec.ServiceAccountName, "the member agent has the controller's rights")
				image := d.Spec.Template.Spec.Containers[0].Image
				assert.Equal(t, strings.Replace(ctl.Spec.Template.Spec.Containers[0].Image, "/kagenti-agentcard:", "/"+memberOnlyDeployment+":", 1), image,
					"the member agent's image is %s, from the controller's registry and tag", memberOnlyDeployment)
				run, mode = memberBin, "member"
			}
			out, err := exec.Command(run, append(args, "--help")...).CombinedOutput()
			require.NoError(t, err, "%s refuses the rendered arguments %q: %s", filepath.Base(run), args, out)

			socket := flagValue(args, "--federation-spiffe-socket")
			assert.Contains(t, name, mode, "the rendered --federation")
			pod := d.Spec.Template.Spec
			volumes := map[string]corev1.Volume{}
			for _, v := range pod.Volumes {
				volumes[v.Name] = v
			}
			mounts := map[string]string{}
			for _, m := range pod.Containers[0].VolumeMounts {
				_, ok := volumes[m.Name]
				assert.True(t, ok, "mount %s has no volume", m.Name)
				mounts[m.MountPath] = m.Name
			}
			if strings.Contains(name, "certSecret") {
				assert.Empty(t, socket)
				for _, f := range []string{"--federation-cert-file", "--federation-key-file", "--federation-hub-bundle-file"} {
					assert.Equal(t, "federation-identity", mounts[filepath.Dir(flagValue(args, f))], "%s is in the Secret's mount", f)
				}
				assert.Equal(t, "agentcard-federation", volumes["federation-identity"].Secret.SecretName)
			} else {
				require.True(t, strings.HasPrefix(socket, "unix:///"), "--federation-spiffe-socket=%q", socket)
				v := volumes[mounts[filepath.Dir(strings.TrimPrefix(socket, "unix://"))]]
				if strings.Contains(name, "hostPath") {
					require.NotNil(t, v.HostPath, "the socket's directory is a hostPath volume")
				} else {
					require.NotNil(t, v.CSI, "the socket's directory is the SPIFFE CSI driver's volume")
					assert.Equal(t, "csi.spiffe.io", v.CSI.Driver)
				}
			}
			if mode == "member" {
				assert.Equal(t, "a", flagValue(args, "--cluster-name"))
				assert.Equal(t, hubSpiffeID, flagValue(args, "--federation-hub-spiffe-id"))
				assert.NotEmpty(t, flagValue(args, "--federation-hub-address"))
				return
			}
			var svc *corev1.Service
			for _, o := range objs {
				if o.GetKind() == "Service" && o.GetName() == "kagenti-agentcard-federation" {
					svc = &corev1.Service{}
					require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, svc))
				}
			}
			require.NotNil(t, svc, "a hub renders Service kagenti-agentcard-federation")
			bind := flagValue(args, "--federation-bind-address")
			port := svc.Spec.Ports[0].TargetPort.String()
			var found bool
			for _, p := range pod.Containers[0].Ports {
				if p.Name == port {
					found = true
					assert.Equal(t, fmt.Sprintf(":%d", p.ContainerPort), bind, "the container port is the one the hub listens on")
				}
			}
			assert.True(t, found, "the Service targets port %q, which the container does not name", port)
			// The hub's leader labels its own pod (hub.LeaderLabel): the Service selects the
			// Deployment's pods that carry the label, so a member never dials a follower.
			want := map[string]string{"kagenti.io/federation-leader": "true"}
			for k, v := range d.Spec.Selector.MatchLabels {
				want[k] = v
			}
			assert.Equal(t, want, svc.Spec.Selector, "the federation Service selects the leader's pod only")
		})
	}
}

// TestFederationHubAndMemberConnectWithShippedRBAC: agentcard as a hub and as a member, each as
// ServiceAccount kagenti-agentcard with the rights the kustomize overlay ships, with the
// federation arguments the overlays render (the SPIFFE socket replaced by development certificate
// files: there is no SPIRE agent here). The member connects and the hub reports it Connected on its
// FederatedCluster, with no request forbidden.
func TestFederationHubAndMemberConnectWithShippedRBAC(t *testing.T) {
	bin, memberBin := buildAgentcard(t, "kagenti-agentcard"), buildAgentcard(t, memberOnlyDeployment)
	installs := federationInstalls(t)
	env, _, c := startEnv(t)
	install(t, c, render(t, tool(t, "kubectl"), "kustomize", filepath.Join(repoRoot(), "deploy", "kustomize", "overlays", "agentcard-only")))
	user, groups := serviceAccountUser("kagenti-system", "kagenti-agentcard")
	kubeconfig := kubeconfigFor(t, env, user, groups)

	dir := t.TempDir()
	devPKI := func(side, td, id string) (cert, key, ca string) {
		caDir := filepath.Join(dir, side)
		run := func(args ...string) {
			out, err := exec.Command(bin, args...).CombinedOutput()
			require.NoError(t, err, "kagenti-agentcard %s: %s", strings.Join(args, " "), out)
		}
		run("dev-ca", "--trust-domain", td, "--out-dir", caDir)
		cert, key, ca = filepath.Join(caDir, "svid.crt"), filepath.Join(caDir, "svid.key"), filepath.Join(caDir, "ca.crt")
		run("dev-svid", "--ca-cert", ca, "--ca-key", filepath.Join(caDir, "ca.key"), "--spiffe-id", id, "--out-cert", cert, "--out-key", key)
		return cert, key, ca
	}
	hubCert, hubKey, hubCA := devPKI("hub", "hub.example", hubSpiffeID)
	memberCert, memberKey, memberCA := devPKI("a", "a.example", memberSpiffeID)
	// Member b runs its member agent alone (the member-only installs).
	onlyCert, onlyKey, onlyCA := devPKI("b", "b.example", "spiffe://b.example/ns/kagenti-system/sa/kagenti-agentcard")
	for name, ca := range map[string]string{"a": memberCA, "b": onlyCA} {
		bundle, err := os.ReadFile(ca)
		require.NoError(t, err)
		fc := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "kagenti.io/v1alpha1", "kind": "FederatedCluster", "metadata": map[string]any{"name": name},
			"spec": map[string]any{"trustDomain": name + ".example", "trustBundle": string(bundle)},
		}}
		require.NoError(t, c.Create(context.Background(), fc))
	}

	// federationArgs: the rendered federation flags, the socket swapped for certificate files.
	federationArgs := func(install string, files ...string) []string {
		_, rendered := federationPod(t, install, installs[install])
		var out []string
		for _, a := range rendered {
			if (strings.HasPrefix(a, "--federation") || strings.HasPrefix(a, "--cluster-name")) &&
				!strings.HasPrefix(a, "--federation-spiffe-socket") && !strings.HasPrefix(a, "--federation-bind-address") &&
				!strings.HasPrefix(a, "--federation-hub-address") {
				out = append(out, a)
			}
		}
		return append(out, files...)
	}
	hubAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	common := func(more ...string) []string {
		return append([]string{"--kubeconfig", kubeconfig, "--metrics-bind-address", "0",
			"--health-probe-bind-address", fmt.Sprintf("127.0.0.1:%d", freePort(t))}, more...)
	}
	hubLog := start(t, bin, append(common("--discovery-bind-address", "0"), federationArgs("kustomize hub", "--cluster-name=hub", "--federation-bind-address="+hubAddr,
		"--federation-cert-file="+hubCert, "--federation-key-file="+hubKey)...)...)
	memberLog := start(t, bin, append(common("--discovery-bind-address", "0"), federationArgs("kustomize member", "--federation-hub-address="+hubAddr,
		"--federation-cert-file="+memberCert, "--federation-key-file="+memberKey, "--federation-hub-bundle-file="+hubCA)...)...)
	memberOnlyLog := start(t, memberBin, append(common(), federationArgs("kustomize member-only", "--federation-hub-address="+hubAddr, "--cluster-name=b",
		"--federation-cert-file="+onlyCert, "--federation-key-file="+onlyKey, "--federation-hub-bundle-file="+hubCA)...)...)

	for _, member := range []string{"a", "b"} {
		waitFor(t, hubLog, "FederatedCluster "+member+" Connected", func() bool {
			got := &unstructured.Unstructured{}
			got.SetAPIVersion("kagenti.io/v1alpha1")
			got.SetKind("FederatedCluster")
			if err := c.Get(context.Background(), client.ObjectKey{Name: member}, got); err != nil {
				return false
			}
			conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
			for _, cond := range conds {
				m, _ := cond.(map[string]any)
				if m["type"] == "Connected" && m["status"] == "True" {
					return true
				}
			}
			return false
		})
	}
	for name, log := range map[string]*syncBuffer{"hub": hubLog, "member": memberLog, "member-only": memberOnlyLog} {
		assert.NotContains(t, log.String(), "forbidden", "the %s needed a right the shipped RBAC does not grant", name)
		if t.Failed() {
			t.Logf("log of the %s:\n%s", name, log.String())
		}
	}
}

// flagValue is the value of --name=value in args.
func flagValue(args []string, name string) string {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
	}
	return ""
}

// buildAgentcard builds one of agentcard's binaries: kagenti-agentcard, or
// kagenti-agentcard-federation-member.
func buildAgentcard(t *testing.T, name string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), name)
	cmd := exec.Command("go", "build", "-o", bin, "./agentcard/cmd/"+name)
	cmd.Dir = repoRoot()
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	return bin
}
