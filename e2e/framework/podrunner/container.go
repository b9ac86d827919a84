package podrunner

import (
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
)

// checkPod refuses, naming the field, what the runner cannot do as the kubelet would: a pod it
// ran differently from the spec would prove nothing.
func checkPod(pod *corev1.Pod) error {
	s := pod.Spec
	switch {
	case s.HostNetwork || s.HostPID || s.HostIPC:
		return fmt.Errorf("pod %s: hostNetwork/hostPID/hostIPC are not supported", pod.Name)
	case s.ShareProcessNamespace != nil && *s.ShareProcessNamespace:
		return fmt.Errorf("pod %s: shareProcessNamespace is not supported", pod.Name)
	case s.HostUsers != nil && !*s.HostUsers:
		return fmt.Errorf("pod %s: hostUsers: false (user namespaces) is not supported", pod.Name)
	case len(s.HostAliases) > 0 || s.DNSConfig != nil:
		return fmt.Errorf("pod %s: hostAliases and dnsConfig are not supported (the pods use the host's resolver)", pod.Name)
	case s.RuntimeClassName != nil || len(s.ResourceClaims) > 0 || s.Resources != nil:
		return fmt.Errorf("pod %s: runtimeClassName, resourceClaims and pod-level resources are not supported", pod.Name)
	case s.SetHostnameAsFQDN != nil && *s.SetHostnameAsFQDN:
		return fmt.Errorf("pod %s: setHostnameAsFQDN is not supported (the runner knows no cluster domain)", pod.Name)
	}
	if sc := s.SecurityContext; sc != nil {
		if sc.FSGroup != nil || sc.FSGroupChangePolicy != nil || len(sc.Sysctls) > 0 || sc.SELinuxOptions != nil ||
			sc.SeccompProfile != nil || sc.AppArmorProfile != nil || sc.WindowsOptions != nil || sc.SupplementalGroupsPolicy != nil {
			return fmt.Errorf("pod %s: securityContext supports runAsUser, runAsGroup, runAsNonRoot and supplementalGroups only", pod.Name)
		}
	}
	for _, list := range [][]corev1.Container{s.InitContainers, s.Containers} {
		for i := range list {
			if err := checkContainer(&list[i]); err != nil {
				return fmt.Errorf("pod %s: %w", pod.Name, err)
			}
		}
	}
	if len(s.EphemeralContainers) > 0 {
		return fmt.Errorf("pod %s: ephemeral containers are not supported", pod.Name)
	}
	return nil
}

func checkContainer(c *corev1.Container) error {
	unsupported := map[string]bool{
		"lifecycle":          c.Lifecycle != nil,
		"stdin/tty":          c.Stdin || c.TTY,
		"volumeDevices":      len(c.VolumeDevices) > 0,
		"restartPolicyRules": len(c.RestartPolicyRules) > 0,
	}
	for field, set := range unsupported {
		if set {
			return fmt.Errorf("container %s: %s is not supported", c.Name, field)
		}
	}
	for field, p := range map[string]*corev1.Probe{"livenessProbe": c.LivenessProbe, "readinessProbe": c.ReadinessProbe, "startupProbe": c.StartupProbe} {
		if err := checkProbe(c, field, p); err != nil {
			return err
		}
	}
	if c.RestartPolicy != nil && *c.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		return fmt.Errorf("container %s: restartPolicy %s is not supported", c.Name, *c.RestartPolicy)
	}
	for _, p := range c.Ports {
		if p.HostPort != 0 {
			return fmt.Errorf("container %s: ports[%s].hostPort is not supported", c.Name, p.Name)
		}
	}
	for _, m := range c.VolumeMounts {
		if m.SubPath != "" || m.SubPathExpr != "" || m.MountPropagation != nil || m.RecursiveReadOnly != nil {
			return fmt.Errorf("container %s: volumeMounts[%s]: subPath, subPathExpr, mountPropagation and recursiveReadOnly are not supported", c.Name, m.Name)
		}
	}
	if sc := c.SecurityContext; sc != nil {
		if (sc.Privileged != nil && *sc.Privileged) || sc.ProcMount != nil || sc.SELinuxOptions != nil ||
			sc.SeccompProfile != nil || sc.AppArmorProfile != nil || sc.WindowsOptions != nil {
			return fmt.Errorf("container %s: securityContext: privileged, procMount, seLinuxOptions, seccompProfile, appArmorProfile and windowsOptions are not supported", c.Name)
		}
	}
	return nil
}

// imageName is the last path element of an image reference without tag or digest:
// "ghcr.io/kagenti/kagenti-authbridge:v0.1.0" → "kagenti-authbridge".
func imageName(image string) string {
	image, _, _ = strings.Cut(image, "@")
	name := path.Base(image)
	name, _, _ = strings.Cut(name, ":")
	return name
}

// imageEnv is what a container runtime gives every process besides the spec's env: a PATH (the
// images' conventional one) and HOSTNAME, the pod's hostname.
func imageEnv(pod *corev1.Pod) []string {
	return []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOSTNAME=" + podHostname(pod)}
}

// podHostname is the hostname the kubelet gives the pod's containers (the kernel's, in the pod's
// UTS namespace): spec.hostname when set, else the pod's name cut to 63 characters, without a
// trailing '-' or '.' (setHostnameAsFQDN is refused by checkPod).
func podHostname(pod *corev1.Pod) string {
	if pod.Spec.Hostname != "" {
		return pod.Spec.Hostname
	}
	name := pod.Name
	if len(name) > 63 {
		name = strings.TrimRight(name[:63], "-.")
	}
	return name
}

// launchSpecFor builds how one container is started: program, arguments, env, user, capabilities
// and mounts.
func (r *podRun) launchSpecFor(ctx context.Context, c *corev1.Container, mayBeAgent bool) (launchSpec, error) {
	env, vars, err := r.containerEnv(ctx, c)
	if err != nil {
		return launchSpec{}, err
	}
	s := launchSpec{NetNS: r.net.NSPath(), Hostname: podHostname(r.pod), Dir: c.WorkingDir, Env: append(imageEnv(r.pod), env...)}
	if s.Argv, s.Env, err = r.argv(c, vars, s.Env, mayBeAgent); err != nil {
		return launchSpec{}, err
	}
	if err := r.applySecurityContext(c, &s); err != nil {
		return launchSpec{}, err
	}
	if s.Mounts, err = r.mountsOf(c); err != nil {
		return launchSpec{}, err
	}
	return s, nil
}

// argv maps the image to a local program (its entrypoint) with the spec's expanded args, or,
// for an image the runner has no program for, to the test's stand-in agent.
func (r *podRun) argv(c *corev1.Container, vars map[string]string, env []string, mayBeAgent bool) ([]string, []string, error) {
	program, ok := r.k.Programs[imageName(c.Image)]
	if !ok {
		if !mayBeAgent || len(r.k.AgentArgv) == 0 {
			return nil, nil, fmt.Errorf("container %s: no program for image %s", c.Name, c.Image)
		}
		// The stand-in is a test server: the agent image's own command means nothing to it.
		return r.k.AgentArgv, append(env, r.k.AgentEnv...), nil
	}
	if len(c.Command) > 0 {
		return nil, nil, fmt.Errorf("container %s: command %q replaces the entrypoint of %s, which the runner maps to %s only as entrypoint",
			c.Name, c.Command, c.Image, program)
	}
	argv := []string{program}
	for _, a := range c.Args {
		argv = append(argv, expand(a, vars))
	}
	return argv, env, nil
}

// applySecurityContext sets user, groups and capabilities as the kubelet and a container runtime
// would: container settings over pod settings, root when none (the stand-ins' images declare no
// USER), the runtime's default capability set changed by add/drop.
func (r *podRun) applySecurityContext(c *corev1.Container, s *launchSpec) error {
	psc := r.pod.Spec.SecurityContext
	if psc == nil {
		psc = &corev1.PodSecurityContext{}
	}
	csc := c.SecurityContext
	if csc == nil {
		csc = &corev1.SecurityContext{}
	}
	uid, gid := first(csc.RunAsUser, psc.RunAsUser), first(csc.RunAsGroup, psc.RunAsGroup)
	nonRoot := csc.RunAsNonRoot
	if nonRoot == nil {
		nonRoot = psc.RunAsNonRoot
	}
	if nonRoot != nil && *nonRoot && uid == 0 {
		return fmt.Errorf("container %s: runAsNonRoot is set and it would run as root (the kubelet refuses to start it)", c.Name)
	}
	s.UID, s.GID = uint32(uid), uint32(gid)
	for _, g := range psc.SupplementalGroups {
		s.Groups = append(s.Groups, uint32(g))
	}
	s.NoNewPrivs = csc.AllowPrivilegeEscalation != nil && !*csc.AllowPrivilegeEscalation
	s.ReadOnlyRoot = csc.ReadOnlyRootFilesystem != nil && *csc.ReadOnlyRootFilesystem
	caps, err := boundingSet(csc.Capabilities)
	if err != nil {
		return fmt.Errorf("container %s: securityContext.capabilities: %w", c.Name, err)
	}
	s.Capabilities = caps
	return nil
}

func first(a, b *int64) int64 {
	switch {
	case a != nil:
		return *a
	case b != nil:
		return *b
	}
	return 0
}

// capabilityNumbers are the capabilities a pod spec may name; defaultCapabilities are those
// containerd and CRI-O give a container.
var capabilityNumbers = map[corev1.Capability]uintptr{
	"CHOWN": unix.CAP_CHOWN, "DAC_OVERRIDE": unix.CAP_DAC_OVERRIDE, "DAC_READ_SEARCH": unix.CAP_DAC_READ_SEARCH,
	"FOWNER": unix.CAP_FOWNER, "FSETID": unix.CAP_FSETID, "KILL": unix.CAP_KILL, "SETGID": unix.CAP_SETGID,
	"SETUID": unix.CAP_SETUID, "SETPCAP": unix.CAP_SETPCAP, "NET_BIND_SERVICE": unix.CAP_NET_BIND_SERVICE,
	"NET_ADMIN": unix.CAP_NET_ADMIN, "NET_RAW": unix.CAP_NET_RAW, "SYS_CHROOT": unix.CAP_SYS_CHROOT,
	"SYS_ADMIN": unix.CAP_SYS_ADMIN, "SYS_PTRACE": unix.CAP_SYS_PTRACE, "MKNOD": unix.CAP_MKNOD,
	"AUDIT_WRITE": unix.CAP_AUDIT_WRITE, "SETFCAP": unix.CAP_SETFCAP, "IPC_LOCK": unix.CAP_IPC_LOCK,
	"SYS_RESOURCE": unix.CAP_SYS_RESOURCE, "SYS_TIME": unix.CAP_SYS_TIME, "BPF": unix.CAP_BPF,
	"PERFMON": unix.CAP_PERFMON, "SYS_NICE": unix.CAP_SYS_NICE, "SYS_MODULE": unix.CAP_SYS_MODULE,
}

var defaultCapabilities = []corev1.Capability{"CHOWN", "DAC_OVERRIDE", "FSETID", "FOWNER", "MKNOD", "NET_RAW",
	"SETGID", "SETUID", "SETFCAP", "SETPCAP", "NET_BIND_SERVICE", "SYS_CHROOT", "KILL", "AUDIT_WRITE"}

func boundingSet(caps *corev1.Capabilities) ([]uintptr, error) {
	set := map[corev1.Capability]bool{}
	for _, c := range defaultCapabilities {
		set[c] = true
	}
	if caps != nil {
		for _, c := range caps.Drop {
			if c == "ALL" {
				clear(set)
				continue
			}
			delete(set, normalizeCap(c))
		}
		for _, c := range caps.Add {
			set[normalizeCap(c)] = true
		}
	}
	out := []uintptr{}
	for c := range set {
		n, ok := capabilityNumbers[c]
		if !ok {
			return nil, fmt.Errorf("capability %s is not supported", c)
		}
		out = append(out, n)
	}
	return out, nil
}

func normalizeCap(c corev1.Capability) corev1.Capability {
	return corev1.Capability(strings.TrimPrefix(strings.ToUpper(string(c)), "CAP_"))
}

// mountsOf binds the pod's volume directories at the container's mount paths. The mount points
// are created on the host's file system (the runner removes those it created).
func (r *podRun) mountsOf(c *corev1.Container) ([]bindMount, error) {
	var mounts []bindMount
	for _, m := range c.VolumeMounts {
		vol, ok := r.volumes[m.Name]
		if !ok {
			return nil, fmt.Errorf("container %s: volumeMounts[%s]: no such volume", c.Name, m.Name)
		}
		if !filepath.IsAbs(m.MountPath) {
			return nil, fmt.Errorf("container %s: volumeMounts[%s].mountPath %q is not absolute", c.Name, m.Name, m.MountPath)
		}
		if err := r.k.mountPoint(m.MountPath); err != nil {
			return nil, fmt.Errorf("container %s: volumeMounts[%s]: %w", c.Name, m.Name, err)
		}
		mounts = append(mounts, bindMount{Source: vol.dir, Target: m.MountPath, ReadOnly: m.ReadOnly})
	}
	return mounts, nil
}

// ensureDir creates dir with mode (not filtered by the umask).
func ensureDir(dir string, mode os.FileMode) error {
	if err := os.MkdirAll(dir, mode); err != nil {
		return err
	}
	return os.Chmod(dir, mode)
}
