package ducktest

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// ControlPlane is the kube-apiserver and etcd that envtest started as children of this test
// process: load tests read their CPU seconds to show what the API server spends on a controller's
// writes (on a 2-core machine, usually more than the controller).
type ControlPlane struct {
	APIServer, Etcd int // pids
}

// FindControlPlane finds this process's kube-apiserver and etcd children in /proc.
func FindControlPlane(t *testing.T) ControlPlane {
	t.Helper()
	var p ControlPlane
	entries, err := os.ReadDir("/proc")
	require.NoError(t, err)
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		comm, rest, ok := strings.Cut(string(b), ") ")
		f := strings.Fields(rest)
		if !ok || len(f) < 2 || f[1] != strconv.Itoa(os.Getpid()) {
			continue
		}
		switch {
		case strings.HasSuffix(comm, "(kube-apiserver"):
			p.APIServer = pid
		case strings.HasSuffix(comm, "(etcd"):
			p.Etcd = pid
		}
	}
	require.NotZero(t, p.APIServer, "no kube-apiserver child process")
	require.NotZero(t, p.Etcd, "no etcd child process")
	return p
}

// CPUSeconds are the CPU seconds kube-apiserver and etcd have used so far.
func (p ControlPlane) CPUSeconds() [2]float64 {
	return [2]float64{CPUSeconds(p.APIServer), CPUSeconds(p.Etcd)}
}
