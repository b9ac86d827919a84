// Package memlimit gives a controller's Go runtime a soft memory limit below its container's
// memory limit, when GOMEMLIMIT does not set one.
//
// Why: the Go garbage collector lets the heap grow to twice the live heap (GOGC=100) and knows
// nothing of the container's limit, so a controller whose live heap grows with the cluster (the
// informer caches) is OOM-killed at about half the heap it could live with. With a soft limit the
// collector works harder as the heap approaches it instead. The limit comes from the container, so
// it follows the manifests' resources.limits.memory and needs no number of its own.
//
// The limit is read from the process's own cgroup, found through /proc/self/cgroup and
// /proc/self/mountinfo (cgroup v2, or v1's memory hierarchy), as the smallest limit on the way
// from that cgroup up to the root of the mounted hierarchy: this finds it with a cgroup namespace
// (the cgroup is the mount's root), without one (the mount's root is the container's cgroup, or
// an ancestor of it) and in a cgroup made below the container's. Where /proc does not say (no
// such files, no matching mount), the limit is read at /sys/fs/cgroup as a container with a cgroup
// namespace sees it.
package memlimit

import (
	"bufio"
	"bytes"
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

// Set sets the runtime's soft memory limit to Fraction of the process's cgroup memory limit
// (Limit, with the files under fsRoot: "/" but in tests), unless the environment variable
// GOMEMLIMIT is set (the runtime has applied it already) or there is no memory limit. It returns
// the limit it set (0 for none) and why, for the log.
func Set(fsRoot string) (int64, string, error) {
	if v := os.Getenv("GOMEMLIMIT"); v != "" {
		return 0, "GOMEMLIMIT=" + v + " set in the environment", nil
	}
	container, file, err := Limit(fsRoot)
	if err != nil {
		return 0, "", err
	}
	if container == 0 {
		return 0, "no cgroup memory limit", nil
	}
	limit := int64(float64(container) * Fraction)
	debug.SetMemoryLimit(limit)
	return limit, fmt.Sprintf("%.0f%% of the cgroup memory limit %d MiB (%s)", Fraction*100, container>>20, file), nil
}

// Limit is the memory limit of the process's cgroup in bytes and the file it was read from: the
// smallest limit from its own cgroup (OwnCgroup) up to the root of the mounted hierarchy, or,
// when /proc does not tell the cgroup, the one at CgroupRoot (ContainerLimit). 0 means no limit.
func Limit(fsRoot string) (int64, string, error) {
	cg, err := OwnCgroup(fsRoot)
	if errors.Is(err, errNoCgroup) {
		root := filepath.Join(fsRoot, CgroupRoot)
		limit, err := ContainerLimit(root)
		return limit, root, err
	}
	if err != nil {
		return 0, "", err
	}
	var (
		min  int64
		from string
	)
	// From the process's cgroup up to the mount point: a parent's limit (a pod's, or the
	// container's when a child cgroup was made below it) binds too.
	for dir := cg.Dir; ; dir = filepath.Dir(dir) {
		file := filepath.Join(dir, cg.LimitFile)
		v, err := readLimit(file)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return 0, "", err
		}
		if v > 0 && (min == 0 || v < min) {
			min, from = v, file
		}
		if dir == cg.Mount || len(dir) <= len(cg.Mount) {
			break
		}
	}
	if r := filepath.Clean(fsRoot); r != "/" {
		from = strings.TrimPrefix(from, r)
	}
	return min, from, nil
}

// Cgroup is the memory cgroup of a process as mounted in its mount namespace.
type Cgroup struct {
	// Dir is the cgroup's directory (under fsRoot), Mount the mount point of its hierarchy.
	Dir, Mount string
	// V2 is true for the unified hierarchy (cgroup v2).
	V2 bool
	// LimitFile is the name of the limit file in Dir: memory.max or memory.limit_in_bytes.
	LimitFile string
}

// ProcsFile is the file a process is moved into the cgroup with.
func (c Cgroup) ProcsFile() string { return filepath.Join(c.Dir, "cgroup.procs") }

var errNoCgroup = errors.New("no memory cgroup found in /proc/self/cgroup and /proc/self/mountinfo")

// OwnCgroup finds the process's memory cgroup from fsRoot/proc/self/cgroup and
// fsRoot/proc/self/mountinfo: the memory controller's cgroup v1 hierarchy when it has one, else
// the cgroup v2 one.
func OwnCgroup(fsRoot string) (Cgroup, error) {
	cgroups, err := os.ReadFile(filepath.Join(fsRoot, "proc", "self", "cgroup"))
	if errors.Is(err, fs.ErrNotExist) {
		return Cgroup{}, errNoCgroup
	}
	if err != nil {
		return Cgroup{}, err
	}
	mountinfo, err := os.ReadFile(filepath.Join(fsRoot, "proc", "self", "mountinfo"))
	if errors.Is(err, fs.ErrNotExist) {
		return Cgroup{}, errNoCgroup
	}
	if err != nil {
		return Cgroup{}, err
	}
	var v1Path, v2Path string
	hasV2 := false
	for _, line := range strings.Split(string(cgroups), "\n") {
		// hierarchy-ID:controller-list:cgroup-path
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			v2Path, hasV2 = parts[2], true
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c == "memory" {
				v1Path = parts[2]
			}
		}
	}
	mounts := parseMountinfo(mountinfo)
	if v1Path != "" {
		for _, m := range mounts {
			if m.fstype == "cgroup" && hasOption(m.superOptions, "memory") {
				return Cgroup{Dir: cgroupDir(fsRoot, m, v1Path), Mount: filepath.Join(fsRoot, m.mountPoint), LimitFile: "memory.limit_in_bytes"}, nil
			}
		}
	}
	if hasV2 {
		for _, m := range mounts {
			if m.fstype == "cgroup2" {
				return Cgroup{Dir: cgroupDir(fsRoot, m, v2Path), Mount: filepath.Join(fsRoot, m.mountPoint), V2: true, LimitFile: "memory.max"}, nil
			}
		}
	}
	return Cgroup{}, errNoCgroup
}

// cgroupDir places the cgroup path (as /proc/self/cgroup gives it, from the hierarchy's root) under
// the mount of the hierarchy, whose root may itself be a cgroup below the hierarchy's root (a
// container without a cgroup namespace mounts its own cgroup). A path outside the mount's root
// (the process was moved out of the cgroup its container mounted) leaves the mount point.
func cgroupDir(fsRoot string, m mount, path string) string {
	rel, ok := strings.CutPrefix(path, m.root)
	if m.root == "/" {
		rel, ok = path, true
	}
	if !ok || (rel != "" && !strings.HasPrefix(rel, "/")) {
		rel = ""
	}
	return filepath.Join(fsRoot, m.mountPoint, rel)
}

type mount struct {
	root, mountPoint, fstype, superOptions string
}

// parseMountinfo reads the lines of /proc/self/mountinfo (proc(5)): ID, parent ID, major:minor,
// root, mount point, mount options, optional fields up to "-", file system type, source, super
// options.
func parseMountinfo(b []byte) []mount {
	var out []mount
	s := bufio.NewScanner(bytes.NewReader(b))
	s.Buffer(make([]byte, 64<<10), 1<<20)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		sep := -1
		for i := 6; i < len(fields); i++ {
			if fields[i] == "-" {
				sep = i
				break
			}
		}
		if len(fields) < 5 || sep < 0 || len(fields) < sep+4 {
			continue
		}
		out = append(out, mount{root: unescape(fields[3]), mountPoint: unescape(fields[4]), fstype: fields[sep+1], superOptions: fields[sep+3]})
	}
	return out
}

// unescape decodes the octal escapes (\040 for a space) mountinfo writes in paths.
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func hasOption(options, want string) bool {
	for _, o := range strings.Split(options, ",") {
		if o == want {
			return true
		}
	}
	return false
}

// ContainerLimit reads the memory limit of the cgroup under root in bytes: memory.max (cgroup v2)
// or memory/memory.limit_in_bytes (cgroup v1). 0 means no limit ("max", cgroup v1's page-rounded
// maximum) or no cgroup memory controller to read.
func ContainerLimit(root string) (int64, error) {
	for _, f := range []string{"memory.max", filepath.Join("memory", "memory.limit_in_bytes")} {
		n, err := readLimit(filepath.Join(root, f))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		return n, err
	}
	return 0, nil
}

// readLimit reads a cgroup memory limit file; 0 for no limit.
func readLimit(file string) (int64, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, err
	}
	v := strings.TrimSpace(string(b))
	if v == "max" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", file, err)
	}
	// cgroup v1 reports "no limit" as the largest page-aligned int64.
	if n <= 0 || n >= math.MaxInt64&^0xFFF {
		return 0, nil
	}
	return n, nil
}

// SetFromContainer is Set("/") for a controller's main: it logs the limit it set and why, and an
// unreadable cgroup file as an error (the controller then runs without a limit).
func SetFromContainer(log logr.Logger) {
	limit, why, err := Set("/")
	if err != nil {
		log.Error(err, "reading the container memory limit; the Go runtime keeps no soft memory limit")
		return
	}
	log.Info("Go runtime soft memory limit", "bytes", limit, "source", why)
}
