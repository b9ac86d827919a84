package podrunner

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// The runner starts every pod process through the test binary itself, re-executed with
// childEnv naming what it should be: a network namespace holder, or the launcher that enters a
// pod's namespaces, mounts its volumes, drops to its user and execs the container's program.
// Doing this in Go rather than through nsenter/unshare/setpriv keeps the parent-death signal
// (which a change of credentials clears) and needs no tools on the machine.
const (
	childEnv   = "KAGENTI_PODRUNNER_CHILD"
	launchEnv  = "KAGENTI_PODRUNNER_LAUNCH"
	holdChild  = "netns-holder"
	execChild  = "exec"
	childError = 127
)

// Main runs the child the environment asks for and exits; it returns when this process is not a
// child. Call it first thing in TestMain. extra adds children of the test's own (an agent played
// by a test server): name → main.
func Main(extra map[string]func() int) {
	switch name := os.Getenv(childEnv); name {
	case "":
		return
	case holdChild:
		// Keeps its network namespace alive until the runner closes stdin (or dies: Pdeathsig).
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	case execChild:
		err := launch(os.Getenv(launchEnv))
		fmt.Fprintf(os.Stderr, "podrunner: %v\n", err) // launch only returns on failure
		os.Exit(childError)
	default:
		main, ok := extra[name]
		if !ok {
			fmt.Fprintf(os.Stderr, "podrunner: unknown child %q\n", name)
			os.Exit(childError)
		}
		os.Exit(main())
	}
}

// launchSpec is what the launcher does before it execs a container's program.
type launchSpec struct {
	// NetNS is the pod's network namespace (/proc/<holder>/ns/net).
	NetNS string
	// Hostname is set in the UTS namespace the runner cloned for this process (podHostname).
	Hostname string
	// Mounts are bind mounts of the pod's volume directories at the container's mount paths.
	Mounts []bindMount
	// ReadOnlyRoot makes every other mount read-only (readOnlyRootFilesystem).
	ReadOnlyRoot bool
	// UID, GID and Groups are the container's user; the launcher runs as root.
	UID, GID uint32
	Groups   []uint32
	// Capabilities are kept in the bounding set (nil: all, as for a root process without
	// securityContext.capabilities). A non-root process has none after setuid either way.
	Capabilities []uintptr
	// NoNewPrivs is allowPrivilegeEscalation: false.
	NoNewPrivs bool
	Dir        string
	Argv       []string
	Env        []string
}

type bindMount struct {
	Source, Target string
	ReadOnly       bool
}

// launch enters the pod, mounts, drops privileges and execs; it returns only an error. The thread
// stays locked: setns, the bounding set and no_new_privs are per thread, and exec keeps the
// calling thread's.
func launch(encoded string) error {
	runtime.LockOSThread()
	var s launchSpec
	if err := json.Unmarshal([]byte(encoded), &s); err != nil {
		return fmt.Errorf("decoding the launch spec: %w", err)
	}
	if err := enterNetNS(s.NetNS); err != nil {
		return err
	}
	if err := unix.Sethostname([]byte(s.Hostname)); err != nil {
		return fmt.Errorf("setting the hostname %q: %w", s.Hostname, err)
	}
	if err := mountVolumes(s); err != nil {
		return err
	}
	if s.Dir != "" {
		if err := os.Chdir(s.Dir); err != nil {
			return fmt.Errorf("workingDir: %w", err)
		}
	}
	if err := dropPrivileges(s); err != nil {
		return err
	}
	return syscall.Exec(s.Argv[0], s.Argv, s.Env)
}

func enterNetNS(path string) error {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening the pod's network namespace: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("entering the pod's network namespace: %w", err)
	}
	return nil
}

// mountVolumes works in the mount namespace the runner cloned for this process: nothing it
// mounts is seen outside (private propagation).
func mountVolumes(s launchSpec) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making / private: %w", err)
	}
	if s.ReadOnlyRoot {
		attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}
		if err := unix.MountSetattr(unix.AT_FDCWD, "/", unix.AT_RECURSIVE, attr); err != nil {
			return fmt.Errorf("readOnlyRootFilesystem: %w", err)
		}
	}
	for _, m := range s.Mounts {
		if err := unix.Mount(m.Source, m.Target, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("mounting %s at %s: %w", m.Source, m.Target, err)
		}
		// A bind mount takes the flags of the (now read-only) mount it came from: set them.
		flags := uintptr(unix.MS_BIND | unix.MS_REMOUNT)
		if m.ReadOnly {
			flags |= unix.MS_RDONLY
		}
		if err := unix.Mount("", m.Target, "", flags, ""); err != nil {
			return fmt.Errorf("remounting %s (readOnly %v): %w", m.Target, m.ReadOnly, err)
		}
	}
	return nil
}

func dropPrivileges(s launchSpec) error {
	if s.Capabilities != nil {
		keep := map[uintptr]bool{}
		for _, c := range s.Capabilities {
			keep[c] = true
		}
		for c := uintptr(0); c <= unix.CAP_LAST_CAP; c++ {
			if !keep[c] {
				if err := unix.Prctl(unix.PR_CAPBSET_DROP, c, 0, 0, 0); err != nil {
					return fmt.Errorf("dropping capability %d: %w", c, err)
				}
			}
		}
	}
	groups := make([]int, len(s.Groups))
	for i, g := range s.Groups {
		groups[i] = int(g)
	}
	if err := syscall.Setgroups(groups); err != nil {
		return fmt.Errorf("setgroups: %w", err)
	}
	if err := syscall.Setgid(int(s.GID)); err != nil {
		return fmt.Errorf("runAsGroup %d: %w", s.GID, err)
	}
	if err := syscall.Setuid(int(s.UID)); err != nil {
		return fmt.Errorf("runAsUser %d: %w", s.UID, err)
	}
	if s.NoNewPrivs {
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			return fmt.Errorf("no_new_privs: %w", err)
		}
	}
	// A change of credentials cleared the parent-death signal the runner set: set it again, so
	// the program dies with the test.
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(syscall.SIGKILL), 0, 0, 0); err != nil {
		return fmt.Errorf("parent-death signal: %w", err)
	}
	if ppid, _ := strconv.Atoi(os.Getenv(parentEnv)); ppid != 0 && os.Getppid() != ppid {
		return fmt.Errorf("the runner (pid %d) exited", ppid)
	}
	return nil
}
