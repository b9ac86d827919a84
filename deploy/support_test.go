package deploy_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// pillars are the six binaries, each running as ServiceAccount kagenti-<pillar>.
var pillars = []string{"injector", "tokenexchange", "agenttrace", "agentcard", "agentbuild", "netpol"}

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(filepath.Dir(file))
}

// assetsDir holds kube-apiserver, etcd and kubectl (make tools).
func assetsDir() string {
	if a := os.Getenv("KUBEBUILDER_ASSETS"); a != "" {
		return a
	}
	return filepath.Join(repoRoot(), "bin")
}

// tool returns the path of a binary built by `make tools`, failing (never skipping) without it.
func tool(t *testing.T, name string) string {
	t.Helper()
	for _, dir := range []string{assetsDir(), filepath.Join(repoRoot(), "bin")} {
		if p := filepath.Join(dir, name); fileExists(p) {
			return p
		}
	}
	t.Fatalf("%s not found in %s or bin/: run `make tools`", name, assetsDir())
	return ""
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// startEnv starts a real API server (RBAC authorization) with every pillar's CRDs.
func startEnv(t *testing.T) (*envtest.Environment, *rest.Config, client.Client) {
	t.Helper()
	ctrllog.SetLogger(logr.Discard())
	var crds []string
	for _, p := range []string{"tokenexchange", "agenttrace", "agentcard", "agentbuild"} {
		crds = append(crds, filepath.Join(repoRoot(), "deploy", "crds", p))
	}
	env := &envtest.Environment{BinaryAssetsDirectory: assetsDir(), CRDDirectoryPaths: crds, ErrorIfCRDPathMissing: true}
	cfg, err := env.Start()
	require.NoError(t, err, "starting envtest (binaries from `make tools`)")
	t.Cleanup(func() { _ = env.Stop() })
	c, err := client.New(cfg, client.Options{})
	require.NoError(t, err)
	return env, cfg, c
}

// render runs a renderer (kubectl kustomize, helm template) and decodes its objects.
func render(t *testing.T, name string, args ...string) []*unstructured.Unstructured {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	require.NoError(t, cmd.Run(), "%s %s: %s", filepath.Base(name), strings.Join(args, " "), errOut.String())
	var objs []*unstructured.Unstructured
	dec := yaml.NewYAMLOrJSONDecoder(&out, 4096)
	for {
		u := &unstructured.Unstructured{}
		err := dec.Decode(&u.Object)
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
	require.NotEmpty(t, objs)
	return objs
}

// install creates the rendered objects: Namespaces first; CRDs come from envtest (the same files).
func install(t *testing.T, c client.Client, objs []*unstructured.Unstructured) {
	t.Helper()
	ctx := context.Background()
	for _, first := range []bool{true, false} {
		for _, o := range objs {
			if o.GetKind() == "CustomResourceDefinition" || (o.GetKind() == "Namespace") != first {
				continue
			}
			require.NoError(t, c.Create(ctx, o.DeepCopy()), "%s %s/%s", o.GetKind(), o.GetNamespace(), o.GetName())
		}
	}
}

// serviceAccountUser is the identity the API server gives a pod running as ServiceAccount ns/name.
func serviceAccountUser(ns, name string) (string, []string) {
	return "system:serviceaccount:" + ns + ":" + name,
		[]string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}
}

// access is one request a ServiceAccount must (allowed) or must not be able to make.
type access struct {
	sa        string // ServiceAccount name, in the install's namespace unless saNS is set
	saNS      string
	verb      string
	group     string
	resource  string
	namespace string
	name      string
	path      string // a non-resource URL instead of a resource
	allowed   bool
}

func (a access) String() string {
	target := a.path
	if target == "" {
		target = a.resource
		if a.group != "" {
			target += "." + a.group
		}
		if a.name != "" {
			target += "/" + a.name
		}
		if a.namespace != "" {
			target += " in " + a.namespace
		} else {
			target += " (cluster-wide)"
		}
	}
	want := "may not"
	if a.allowed {
		want = "may"
	}
	return a.sa + " " + want + " " + a.verb + " " + target
}

// check asks the API server's authorizer (SubjectAccessReview) whether each access is allowed.
func check(t *testing.T, c client.Client, installNS string, accesses []access) {
	t.Helper()
	for _, a := range accesses {
		ns := a.saNS
		if ns == "" {
			ns = installNS
		}
		user, groups := serviceAccountUser(ns, a.sa)
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: user, Groups: groups}}
		if a.path != "" {
			sar.Spec.NonResourceAttributes = &authorizationv1.NonResourceAttributes{Path: a.path, Verb: a.verb}
		} else {
			sar.Spec.ResourceAttributes = &authorizationv1.ResourceAttributes{
				Verb: a.verb, Group: a.group, Resource: a.resource, Namespace: a.namespace, Name: a.name,
			}
		}
		require.NoError(t, c.Create(context.Background(), sar))
		if sar.Status.Allowed != a.allowed {
			t.Errorf("%s: the API server says allowed=%v (%s)", a, sar.Status.Allowed, sar.Status.Reason)
		}
	}
}
