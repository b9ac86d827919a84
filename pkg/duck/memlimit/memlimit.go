// Package memlimit gives a controller's Go runtime a soft memory limit below its container's
// memory limit, when GOMEMLIMIT does not set one.
//
// Why: the Go garbage collector lets the heap grow to twice the live heap (GOGC=100) and knows
// nothing of the container's limit, so a controller whose live heap grows with the cluster (the
// informer caches) is OOM-killed at about half the heap it could live with. With a soft limit the
// collector works harder as the heap approaches it instead. The limit comes from the container, so
// it follows the manifests' resources.limits.memory and needs no number of its own.
package memlimit

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/go-logr/logr"
)

// Fraction of the container's memory limit given to the Go runtime: the rest is for what the
// runtime does not count (the binary's file-backed pages, about 25 MiB for a controller, and
// memory not yet returned to the OS).
const Fraction = 0.9

// CgroupRoot is where a container sees its own cgroup (cgroup v2 with a cgroup namespace, or the
// memory controller's directory under it with cgroup v1).
const CgroupRoot = "/sys/fs/cgroup"

// Set sets the runtime's soft memory limit to Fraction of the container's memory limit read under
// root, unless the environment variable GOMEMLIMIT is set (the runtime has applied it already) or
// the container has no memory limit. It returns the limit it set (0 for none) and why, for the
// log.
func Set(root string) (int64, string, error) {
	if v := os.Getenv("GOMEMLIMIT"); v != "" {
		return 0, "GOMEMLIMIT=" + v + " set in the environment", nil
	}
	container, err := ContainerLimit(root)
	if err != nil {
		return 0, "", err
	}
	if container == 0 {
		return 0, "no container memory limit", nil
	}
	limit := int64(float64(container) * Fraction)
	debug.SetMemoryLimit(limit)
	return limit, fmt.Sprintf("%.0f%% of the container memory limit %d MiB", Fraction*100, container>>20), nil
}

// ContainerLimit reads the memory limit of the cgroup under root in bytes: memory.max (cgroup v2)
// or memory/memory.limit_in_bytes (cgroup v1). 0 means no limit ("max", cgroup v1's page-rounded
// maximum) or no cgroup memory controller to read.
func ContainerLimit(root string) (int64, error) {
	for _, f := range []string{"memory.max", filepath.Join("memory", "memory.limit_in_bytes")} {
		b, err := os.ReadFile(filepath.Join(root, f))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return 0, err
		}
		v := strings.TrimSpace(string(b))
		if v == "max" {
			return 0, nil
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", filepath.Join(root, f), err)
		}
		// cgroup v1 reports "no limit" as the largest page-aligned int64.
		if n <= 0 || n >= math.MaxInt64&^0xFFF {
			return 0, nil
		}
		return n, nil
	}
	return 0, nil
}

// SetFromContainer is Set(CgroupRoot) for a controller's main: it logs the limit it set and why,
// and an unreadable cgroup file as an error (the controller then runs without a limit).
func SetFromContainer(log logr.Logger) {
	limit, why, err := Set(CgroupRoot)
	if err != nil {
		log.Error(err, "reading the container memory limit; the Go runtime keeps no soft memory limit")
		return
	}
	log.Info("Go runtime soft memory limit", "bytes", limit, "source", why)
}
