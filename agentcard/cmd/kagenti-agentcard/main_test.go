package main

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// The shipped Deployment passes only flags the binary has, names the Secret the rotator fills, and
// mounts a writable emptyDir where agentcard writes the certificate from it.
func TestShippedDeploymentArgs(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "..", "deploy", "kustomize", "agentcard", "deployment.yaml"))
	require.NoError(t, err)
	var d appsv1.Deployment
	require.NoError(t, yaml.UnmarshalStrict(raw, &d))
	c := d.Spec.Template.Spec.Containers[0]

	cmd := newRootCommand()
	require.NoError(t, cmd.ParseFlags(c.Args), "shipped args %v", c.Args)
	flag := func(name string) string { return cmd.Flags().Lookup(name).Value.String() }

	var secret corev1.Secret
	raw, err = os.ReadFile(filepath.Join("..", "..", "..", "deploy", "kustomize", "agentcard", "secret.yaml"))
	require.NoError(t, err)
	require.NoError(t, yaml.UnmarshalStrict(raw, &secret))
	assert.Equal(t, secret.Name, flag("discovery-cert-secret"))

	// The rotator's certificate is written by agentcard into a writable emptyDir mounted at
	// --discovery-rotator-cert-dir (certfiles), not read from a Secret volume.
	mounted := ""
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.EmptyDir != nil {
			for _, m := range c.VolumeMounts {
				if m.Name == v.Name && !m.ReadOnly {
					mounted = m.MountPath
				}
			}
		}
	}
	assert.Equal(t, mounted, flag("discovery-rotator-cert-dir"), "the rotator's certificate is written into the emptyDir mounted there")
	assert.Empty(t, flag("discovery-cert-dir"), "the built-in rotator is the default")
	_, port, err := net.SplitHostPort(flag("discovery-bind-address"))
	require.NoError(t, err)
	containerPort := ""
	for _, p := range c.Ports {
		if p.Name == "discovery" {
			containerPort = strconv.Itoa(int(p.ContainerPort))
		}
	}
	assert.Equal(t, port, containerPort, "container port discovery is --discovery-bind-address's")
}
