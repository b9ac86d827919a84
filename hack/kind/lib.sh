# Shared by hack/kind-up.sh, hack/kind-down.sh and hack/kind.sh (sourced, not run).
#
# The kind cluster of this repository runs on a Docker engine that kind-up starts itself, with all
# of its state under .local/kind/ (data root, exec root, socket, pidfile, log), and with no
# iptables rules, no IP forwarding and no docker0 bridge on the host. Everything the cluster runs is
# built here from pinned sources (Debian packages, the Go module proxy): docs/kind.md.

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BIN="${ROOT}/bin"
KIND_DIR="${ROOT}/hack/kind"
WORK="${ROOT}/.local/kind"
# The build cache (the root filesystems made by debootstrap, the binaries built from the module
# proxy) is keyed by its inputs and shared by every clone on the machine, like Go's build cache: a
# fresh clone, or CI's, builds nothing that an earlier run of the same versions built.
CACHE="${KAGENTI_KIND_CACHE:-${XDG_CACHE_HOME:-${HOME}/.cache}/kagenti/kind}"
CLUSTER="${KAGENTI_KIND_CLUSTER:-kagenti}"
KIND_KUBECONFIG="${WORK}/kubeconfig"

# Versions: Kubernetes and kind are those of bin/ (hack/tools.sh); the Go modules under hack/kind/
# pin CoreDNS and kube-router; Debian's bookworm gives systemd, containerd, runc and the CNI plugins.
KUBE_VERSION="$(sed -n 's/^KUBE_VERSION=//p' "${ROOT}/hack/tools.sh")"
KIND_VERSION="$(sed -n 's/^KIND_VERSION=//p' "${ROOT}/hack/tools.sh")"
DEBIAN_SUITE=bookworm
DEBIAN_MIRROR="${KAGENTI_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
# The node: systemd as PID 1, the container runtime, and what kubelet, kubeadm and kind call.
NODE_PACKAGES=(systemd systemd-sysv dbus conntrack iptables nftables iproute2 ethtool util-linux mount
  kmod libseccomp2 pigz e2fsprogs bash ca-certificates curl jq procps containerd runc
  containernetworking-plugins)
# The base of the images of kube-proxy, kube-router and the control plane (glibc, iptables, ipset).
BASE_PACKAGES=(ca-certificates iptables nftables ipset conntrack iproute2 kmod)
# Host commands and the Debian packages that bring them.
declare -A HOST_PACKAGE_OF=([dockerd]=docker.io [containerd]=containerd [runc]=runc [debootstrap]=debootstrap
  [iptables-save]=iptables [jq]=jq [setcap]=libcap2-bin)

# The engine: our own dockerd, reached only through this socket.
DOCKER_SOCK="${WORK}/docker.sock"
export DOCKER_HOST="unix://${DOCKER_SOCK}"
export DOCKER_BUILDKIT=0 # Debian's dockerd 20.10 has no BuildKit here
DOCKERD_PID="${WORK}/dockerd.pid"
DOCKERD_LOG="${WORK}/dockerd.log"
HOST_BEFORE="${WORK}/host-before.txt"
# Free space kind-up wants under .local/kind before it builds anything (GiB).
MIN_FREE_GIB="${KAGENTI_KIND_MIN_FREE_GIB:-12}"

if [[ -t 2 ]]; then BOLD=$'\033[1m' RED=$'\033[31m' YELLOW=$'\033[33m' RESET=$'\033[0m'; else BOLD="" RED="" YELLOW="" RESET=""; fi
log() { printf '%s[kind]%s %s\n' "${BOLD}" "${RESET}" "$*" >&2; }
warn() { printf '%s[kind] warning:%s %s\n' "${YELLOW}" "${RESET}" "$*" >&2; }
die() {
  printf '%s[kind] error:%s %s\n' "${RED}" "${RESET}" "$*" >&2
  exit 1
}

# stage <name>: prints how long the previous stage took and starts timing the next (for the report
# at the end of kind-up and for docs/benchmarks.md).
STAGE_NAME="" STAGE_START=0
stage() {
  local now; now=$(date +%s)
  [[ -n "${STAGE_NAME}" ]] && log "stage ${STAGE_NAME}: $((now - STAGE_START)) s"
  STAGE_NAME="$1" STAGE_START=${now}
}

# load_into_workers <image>...: one `kind load` of the images into the cluster's workers (every pod
# of the suite runs there; the control plane is tainted).
load_into_workers() {
  local workers; workers="$(kind get nodes --name "${CLUSTER}" | grep -v control-plane | paste -sd, -)"
  kind load docker-image --name "${CLUSTER}" --nodes "${workers}" "$@" >/dev/null 2>&1 || die "kind load docker-image $* failed"
}

# ensure_namespace <name>: creates the namespace unless it exists (two installs may race to it).
ensure_namespace() {
  kubectl create namespace "$1" >/dev/null 2>&1 || kubectl get namespace "$1" >/dev/null
}

# key <file or string>...: 16 hex digits naming a build's inputs; a changed input gives a new key.
key() {
  local a
  for a in "$@"; do
    if [[ -f "$a" ]]; then cat "$a"; else printf '%s\n' "$a"; fi
  done | sha256sum | cut -c1-16
}

# ---------------------------------------------------------------------------------------------------
# host packages

ensure_host_packages() {
  local missing=() cmd
  for cmd in "${!HOST_PACKAGE_OF[@]}"; do
    command -v "${cmd}" >/dev/null 2>&1 || missing+=("${HOST_PACKAGE_OF[${cmd}]}")
  done
  [[ ${#missing[@]} -eq 0 ]] && return 0
  mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
  [[ $(id -u) -eq 0 ]] || die "missing Debian packages ${missing[*]}; install them as root (apt-get install ${missing[*]})"
  log "installing Debian packages: ${missing[*]}"
  apt-get update -qq
  # policy-rc.d (Debian's docker images ship one) or --no-start keeps the package's own dockerd from
  # starting: kind-up runs its own, below.
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  if pgrep -x dockerd >/dev/null && [[ ! -f "${DOCKERD_PID}" ]]; then
    warn "installing docker.io started the system dockerd (pid $(pgrep -d ' ' -x dockerd)); kind-up does not use it"
  fi
}

# ---------------------------------------------------------------------------------------------------
# the engine

# ours_running: our dockerd (pidfile under .local/kind/) is alive and answers on our socket.
dockerd_pid() {
  local pid
  pid="$(cat "${DOCKERD_PID}" 2>/dev/null)" || return 1
  [[ -n "${pid}" ]] && kill -0 "${pid}" 2>/dev/null || return 1
  [[ "$(readlink "/proc/${pid}/exe" 2>/dev/null)" == */dockerd ]] || return 1
  printf '%s' "${pid}"
}

# lacks_cap_sys_resource: the capability bounding set of this machine has no CAP_SYS_RESOURCE (24),
# so runc cannot give a privileged container every capability, as docker 20.10 asks it to.
lacks_cap_sys_resource() {
  local bnd; bnd="$(awk '/^CapBnd:/ {print $2}' /proc/self/status)"
  (( (0x${bnd} >> 24 & 1) == 0 ))
}

# Host state dockerd may change; recorded before it starts, compared and restored after it stops.
HOST_SYSCTLS=(net.ipv4.ip_forward net.ipv6.conf.all.forwarding net.ipv6.conf.default.forwarding
  net.bridge.bridge-nf-call-iptables net.bridge.bridge-nf-call-ip6tables net.bridge.bridge-nf-call-arptables)

host_state() {
  local s
  for s in "${HOST_SYSCTLS[@]}"; do
    printf 'sysctl %s %s\n' "${s}" "$(sysctl -n "${s}" 2>/dev/null || echo absent)"
  done
  # kind mounts /lib/modules into every node; docker makes the directory when the host has none.
  if [[ -e /lib/modules ]]; then echo "path /lib/modules present"; else echo "path /lib/modules absent"; fi
  ip -o link show type bridge 2>/dev/null | awk -F': ' '{print "bridge " $2}' | sed 's/@.*//'
  ip -o link show type veth 2>/dev/null | awk -F': ' '{print "veth " $2}' | sed 's/@.*//'
  local t
  for t in filter nat; do
    iptables-save -t "${t}" 2>/dev/null | grep -E '^(:|-A)' | sed "s/\[[0-9:]*\]//; s/^/iptables ${t} /"
  done
}

start_dockerd() {
  local pid
  if pid="$(dockerd_pid)"; then
    docker info >/dev/null 2>&1 || die "dockerd (pid ${pid}, .local/kind/dockerd.pid) runs but does not answer on ${DOCKER_SOCK}; run 'make kind-down' and retry (log: ${DOCKERD_LOG})"
    log "dockerd already running (pid ${pid}, ours); using it"
    return 0
  fi
  local others; others="$(pgrep -d ' ' -x dockerd || true)"
  [[ -n "${others}" ]] && warn "another dockerd runs on this machine (pid ${others}); kind-up starts its own beside it, on ${DOCKER_SOCK}, and never talks to that one"
  # A unix socket path has at most 107 bytes; containerd's, under the exec root, is the longest.
  local longest="${WORK}/run/containerd/containerd.sock.ttrpc"
  ((${#longest} < 104)) || die "the repository path is too long for dockerd's sockets (${longest}: ${#longest} bytes, at most 103); clone it to a shorter path"
  rm -f "${DOCKERD_PID}" "${DOCKER_SOCK}"
  mkdir -p "${WORK}/docker" "${WORK}/run"
  [[ -f "${HOST_BEFORE}" ]] || host_state > "${HOST_BEFORE}"
  local runtime=""
  if lacks_cap_sys_resource; then
    log "this machine's capability bounding set lacks CAP_SYS_RESOURCE: privileged containers run through hack/kind/runc-nosysres"
    runtime="\"runtimes\": {\"runc-nosysres\": {\"path\": \"${KIND_DIR}/runc-nosysres\"}}, \"default-runtime\": \"runc-nosysres\","
  fi
  cat > "${WORK}/daemon.json" <<EOF
{
  "data-root": "${WORK}/docker",
  "exec-root": "${WORK}/run",
  "pidfile": "${DOCKERD_PID}",
  "hosts": ["${DOCKER_HOST}"],
  "storage-driver": "overlay2",
  "bridge": "none",
  "iptables": false,
  "ip-forward": false,
  "ip-masq": false,
  "default-cgroupns-mode": "private",
  ${runtime}
  "log-level": "warn"
}
EOF
  log "starting dockerd (state under .local/kind/, log ${DOCKERD_LOG#"${ROOT}/"})"
  # setsid: dockerd outlives this script (kind-down stops it by the PID in its pidfile).
  setsid dockerd --config-file "${WORK}/daemon.json" >"${DOCKERD_LOG}" 2>&1 </dev/null 9>&- &
  local i
  for i in $(seq 60); do
    docker info >/dev/null 2>&1 && { log "dockerd ready (pid $(dockerd_pid))"; return 0; }
    kill -0 $! 2>/dev/null || break
    sleep 0.5
  done
  tail -n 20 "${DOCKERD_LOG}" >&2
  stop_dockerd
  die "dockerd did not start (log above: ${DOCKERD_LOG})"
}

# stop_dockerd: stops our dockerd by the PID in its pidfile (never by name), waits for it and for
# the containerd it started, then puts the host back as host_state recorded it.
stop_dockerd() {
  local pid
  if pid="$(dockerd_pid)"; then
    log "stopping dockerd (pid ${pid})"
    kill -TERM "${pid}"
    local i
    for i in $(seq 60); do kill -0 "${pid}" 2>/dev/null || break; sleep 0.5; done
    if kill -0 "${pid}" 2>/dev/null; then
      warn "dockerd (pid ${pid}) did not stop in 30 s; killing it"
      kill -KILL "${pid}" 2>/dev/null || true
    fi
  fi
  # The containerd dockerd started: its pidfile is under our exec root.
  local cpid
  cpid="$(cat "${WORK}/run/containerd/containerd.pid" 2>/dev/null || true)"
  if [[ -n "${cpid}" ]] && [[ "$(readlink "/proc/${cpid}/exe" 2>/dev/null)" == */containerd ]]; then
    kill -TERM "${cpid}" 2>/dev/null || true
  fi
  rm -f "${DOCKERD_PID}" "${DOCKER_SOCK}"
  # Mounts dockerd left under our state (a killed dockerd leaves overlay mounts and netns files).
  local m
  while read -r m; do umount -l "${m}" 2>/dev/null || true; done < <(awk -v w="${WORK}/" 'index($5, w) == 1 {print $5}' /proc/self/mountinfo | sort -r)
  restore_host
}

# restore_host: undoes what changed on the host since host_state was recorded by start_dockerd.
restore_host() {
  [[ -f "${HOST_BEFORE}" ]] || return 0
  local now; now="$(host_state)"
  local line kind name value
  while read -r kind name value; do
    [[ "${kind}" == sysctl && "${value}" != absent ]] || continue
    local cur; cur="$(sysctl -n "${name}" 2>/dev/null || echo absent)"
    if [[ "${cur}" != "${value}" ]]; then
      log "restoring ${name} = ${value} (was ${cur})"
      sysctl -q -w "${name}=${value}" >/dev/null || warn "could not restore ${name}"
    fi
  done < "${HOST_BEFORE}"
  while read -r kind name; do
    [[ "${kind}" == bridge ]] || continue
    grep -qx "bridge ${name}" "${HOST_BEFORE}" && continue
    [[ "${name}" == br-* || "${name}" == docker0 ]] || continue
    log "deleting bridge ${name} (made by dockerd)"
    ip link delete "${name}" 2>/dev/null || warn "could not delete bridge ${name}"
  done <<< "${now}"
  if grep -qx 'path /lib/modules absent' "${HOST_BEFORE}" && [[ -d /lib/modules ]]; then
    log "removing /lib/modules (made empty by docker for kind's mount)"
    rmdir /lib/modules 2>/dev/null || warn "/lib/modules is not empty; left in place"
  fi
  # The FORWARD policy is the one change a default dockerd makes that breaks other tests here.
  local before_policy now_policy
  before_policy="$(awk '$1=="iptables" && $2=="filter" && $3==":FORWARD" {print $4}' "${HOST_BEFORE}")"
  now_policy="$(awk '$1=="iptables" && $2=="filter" && $3==":FORWARD" {print $4}' <<< "${now}")"
  if [[ -n "${before_policy}" && "${before_policy}" != "${now_policy}" ]]; then
    log "restoring the iptables FORWARD policy ${before_policy} (was ${now_policy})"
    iptables -P FORWARD "${before_policy}"
  fi
  now="$(host_state)"
  if diff <(grep -v '^veth ' "${HOST_BEFORE}") <(grep -v '^veth ' <<< "${now}") > "${WORK}/host-diff.txt"; then
    log "host state is as before kind-up (sysctls, bridges, iptables)"
    rm -f "${WORK}/host-diff.txt"
  else
    # Another process may have changed the host meanwhile (network-namespace tests make bridges).
    warn "the host differs from before kind-up (${WORK#"${ROOT}/"}/host-diff.txt):"
    cat "${WORK}/host-diff.txt" >&2
  fi
  rm -f "${HOST_BEFORE}"
}
