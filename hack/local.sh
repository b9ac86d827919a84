#!/usr/bin/env bash
# The local cluster: a kwok cluster (`kwokctl --runtime binary`) on the Kubernetes binaries that
# `make tools` builds into bin/, with every pillar binary in bin/ running as a local process against it.
#
#   hack/local.sh up      start the cluster, install deploy/crds, start the pillars; return
#   hack/local.sh down    stop exactly what `up` started (recorded PIDs) and delete the cluster
#   hack/local.sh run     up, apply deploy/samples, summarise, stream the pillar logs until Ctrl-C, down
#   hack/local.sh e2e [go test flags]
#                         fresh up, render check, `go test ./e2e/...`, down (always); exits with the
#                         test status. Without flags, a second phase then runs the destructive tests
#                         (TestDestructive*: they remove Kagenti) on the same cluster
#   hack/local.sh e2e-destructive [go test flags]
#                         fresh up, only the destructive tests, down
#   hack/local.sh status  what is running
#
# Everything lives under .local/: kubeconfig, kwok/ (KWOK_WORKDIR), logs/<pillar>.log,
# pids/<pillar>.pid, pillars.txt ("<pillar> <health port>" per started pillar, read by e2e).
#
# Pillar hooks: hack/local/<pillar>.sh is sourced when bin/kagenti-<pillar> exists and may define
# <pillar>_args (extra flags, one per line), <pillar>_pre_start, <pillar>_post_start and
# <pillar>_summary. They see ROOT, BIN, LOCAL, KUBECONFIG (exported), kubectl on PATH, and the
# helpers log, warn and die below. See docs/development.md.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${ROOT}/bin"
LOCAL="${ROOT}/.local"
CLUSTER="kagenti"
export ROOT BIN LOCAL
export KUBECONFIG="${LOCAL}/kubeconfig"
export KWOK_WORKDIR="${LOCAL}/kwok"
export PATH="${BIN}:${PATH}"

CLUSTER_DIR="${KWOK_WORKDIR}/clusters/${CLUSTER}"
LOGS="${LOCAL}/logs"
PIDS="${LOCAL}/pids"
PILLARS_FILE="${LOCAL}/pillars.txt"
KWOKCTL_LOG="${LOCAL}/kwokctl.log"

# One simulated node whose pod CIDR is on loopback: pods get 127.1.0.1, 127.1.0.2, … so a process
# on this machine can answer HTTP for a pod (framework.ServeOnPodIP).
NODE="kwok-node-0"
POD_CIDR="127.1.0.0/24"

READY_TIMEOUT="${KAGENTI_LOCAL_READY_TIMEOUT:-60}" # seconds a pillar gets to answer /readyz
STOP_GRACE="${KAGENTI_LOCAL_STOP_GRACE:-10}"        # seconds between TERM and KILL

PILLARS=(injector tokenexchange agenttrace agentcard agentbuild netpol)
declare -A HEALTH_PORT=([injector]=18081 [tokenexchange]=18082 [agenttrace]=18083 [agentcard]=18084 [agentbuild]=18085 [netpol]=18086)
declare -A METRICS_PORT=([injector]=18091 [tokenexchange]=18092 [agenttrace]=18093 [agentcard]=18094 [agentbuild]=18095 [netpol]=18096)
declare -A OTHER_PORTS=([injector]="19443" [tokenexchange]="19444" [agentcard]="18100") # webhooks, discovery API

CLUSTER_TOOLS=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok kwokctl kubectl)

# ---------------------------------------------------------------------------------------------------
# output

if [[ -t 2 ]]; then BOLD=$'\033[1m' RED=$'\033[31m' YELLOW=$'\033[33m' RESET=$'\033[0m'; else BOLD="" RED="" YELLOW="" RESET=""; fi
log() { printf '%s[local]%s %s\n' "${BOLD}" "${RESET}" "$*" >&2; }
warn() { printf '%s[local] warning:%s %s\n' "${YELLOW}" "${RESET}" "$*" >&2; }
die() {
  printf '%s[local] error:%s %s\n' "${RED}" "${RESET}" "$*" >&2
  exit 1
}
rel() { printf '%s' "${1#"${ROOT}/"}"; }

# ---------------------------------------------------------------------------------------------------
# processes and ports

# running <pid>: the process exists and is not a zombie.
running() {
  kill -0 "$1" 2>/dev/null || return 1
  [[ "$(ps -o stat= -p "$1" 2>/dev/null)" != Z* ]]
}

# recorded_pid <pidfile>: prints the recorded PID when that process is alive and still runs a binary
# from bin/ (a PID reused by an unrelated process after a crash is never signalled). Hooks may record
# helper processes they start from bin/ in .local/pids/ too; `down` stops them the same way.
recorded_pid() {
  local file=$1 pid exe
  [[ -f "${file}" ]] || return 1
  pid="$(<"${file}")"
  [[ "${pid}" =~ ^[0-9]+$ ]] || return 1
  running "${pid}" || return 1
  if [[ -e "/proc/${pid}/exe" ]]; then
    exe="$(readlink "/proc/${pid}/exe" 2>/dev/null || true)"
    # /proc/<pid>/exe names the resolved path: bin/ may be a symlink (a second clone sharing the
    # first one's Kubernetes binaries), and then nothing was ever stopped.
    [[ "${exe}" == "${BIN}/"* || "${exe}" == "$(cd "${BIN}" 2>/dev/null && pwd -P)/"* ]] || return 1
  fi
  printf '%s' "${pid}"
}

# stop_pids <name:pid>...: TERM all, KILL whatever is still running after STOP_GRACE seconds.
stop_pids() {
  local entry deadline left=()
  for entry in "$@"; do kill -TERM "${entry#*:}" 2>/dev/null || true; done
  deadline=$((SECONDS + STOP_GRACE))
  while :; do
    left=()
    for entry in "$@"; do running "${entry#*:}" && left+=("${entry}"); done
    ((${#left[@]} == 0)) && break
    if ((SECONDS >= deadline)); then
      for entry in "${left[@]}"; do
        warn "${entry%%:*} (pid ${entry#*:}) ignored TERM for ${STOP_GRACE}s; killing it"
        kill -KILL "${entry#*:}" 2>/dev/null || true
      done
      deadline=$((SECONDS + 5))
    fi
    sleep 0.1
  done
  # Reap the ones that are children of this shell (run/e2e), so no zombie is left behind.
  for entry in "$@"; do wait "${entry#*:}" 2>/dev/null || true; done
}

# port_open <port>: something accepts connections on 127.0.0.1:<port>.
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# port_holder <port>: "name (pid N)" of the listener when ss can tell.
port_holder() {
  command -v ss >/dev/null || return 0
  ss -Hltnp "sport = :$1" 2>/dev/null | grep -o 'users:(("[^"]*",pid=[0-9]*' | head -1 |
    sed -E 's/users:\(\("([^"]*)",pid=([0-9]*)/\1 (pid \2)/'
}

# http_status <port> <path>: the HTTP status code of GET http://127.0.0.1:<port><path> (pure bash,
# so no curl is needed).
http_status() {
  (
    exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
    printf 'GET %s HTTP/1.0\r\nHost: 127.0.0.1:%s\r\nConnection: close\r\n\r\n' "$2" "$1" >&3
    read -r -t 2 _ code _ <&3 || exit 1
    printf '%s' "${code}"
  ) 2>/dev/null
}

k() { "${BIN}/kubectl" --kubeconfig "${KUBECONFIG}" "$@"; }

# ---------------------------------------------------------------------------------------------------
# pillars

available_pillars() {
  local p
  for p in "${PILLARS[@]}"; do [[ -x "${BIN}/kagenti-${p}" ]] && printf '%s\n' "${p}"; done
  return 0
}

pillar_ports() { printf '%s\n' "${HEALTH_PORT[$1]}" "${METRICS_PORT[$1]}" ${OTHER_PORTS[$1]:-}; }

# check_ports <pillar>...: fail, naming port and holder, when a port a pillar needs is taken.
check_ports() {
  local p port holder busy=()
  for p in "$@"; do
    for port in $(pillar_ports "${p}"); do
      if port_open "${port}"; then
        holder="$(port_holder "${port}")"
        busy+=("127.0.0.1:${port} (kagenti-${p}) is held by ${holder:-another process}")
      fi
    done
  done
  if ((${#busy[@]})); then
    printf '%s[local] error:%s ports the pillars need are in use:\n' "${RED}" "${RESET}" >&2
    printf '    %s\n' "${busy[@]}" >&2
    die "stop those processes (or run 'make down' if they are left over from a local cluster) and retry"
  fi
}

# hook <pillar> <hook> [args]: runs <pillar>_<hook> when the pillar's hack/local/<pillar>.sh defines it.
hook() {
  local fn="$1_$2"
  shift 2
  declare -F "${fn}" >/dev/null || return 0
  "${fn}" "$@"
}

start_pillar() {
  local p=$1 bin="${BIN}/kagenti-$1" logf="${LOGS}/$1.log" pidfile="${PIDS}/$1.pid" extra line pid=""
  local args=(--kubeconfig "${KUBECONFIG}"
    # Local processes are scraped over plain HTTP on loopback; deployed binaries serve HTTPS behind
    # the API server's authentication and authorization (docs/security.md).
    --metrics-bind-address "127.0.0.1:${METRICS_PORT[$p]}" --metrics-secure=false
    --health-probe-bind-address "127.0.0.1:${HEALTH_PORT[$p]}")
  extra="$(hook "${p}" args)"
  while IFS= read -r line; do [[ -n "${line}" ]] && args+=("${line}"); done <<<"${extra}"

  rm -f "${pidfile}"
  { printf '# %s %s' "$(date -u +%FT%TZ)" "$(rel "${bin}")"; printf ' %q' "${args[@]}"; printf '\n'; } >"${logf}"
  # A session of its own: a Ctrl-C or a closed terminal does not reach it; `down` stops it by PID.
  # The inner bash records its own PID and then execs the binary, so the PID is the binary's.
  local launcher=()
  command -v setsid >/dev/null && launcher=(setsid)
  "${launcher[@]}" bash -c 'echo $$ >"$0"; exec "$@"' "${pidfile}" "${bin}" "${args[@]}" \
    >>"${logf}" 2>&1 </dev/null &
  for _ in $(seq 50); do
    [[ -s "${pidfile}" ]] && pid="$(<"${pidfile}")" && break
    sleep 0.1
  done
  [[ -n "${pid}" ]] || die "kagenti-${p} did not start (no PID recorded); see $(rel "${logf}")"
  wait_ready "${p}" "${pid}"
}

wait_ready() {
  local p=$1 pid=$2 port=${HEALTH_PORT[$1]} deadline=$((SECONDS + READY_TIMEOUT)) code="" rc
  while :; do
    code="$(http_status "${port}" /readyz || true)"
    [[ "${code}" == 200 ]] && return 0
    if ! running "${pid}"; then
      wait "${pid}" 2>/dev/null && rc=0 || rc=$?
      pillar_failed "${p}" "kagenti-${p} exited (status ${rc}) before it became ready"
    fi
    if ((SECONDS >= deadline)); then
      pillar_failed "${p}" "kagenti-${p} did not become ready within ${READY_TIMEOUT}s" \
        "(GET 127.0.0.1:${port}/readyz: ${code:-no answer})"
    fi
    sleep 0.2
  done
}

pillar_failed() {
  local p=$1
  shift
  {
    printf '%s[local] error:%s %s\n' "${RED}" "${RESET}" "$*"
    printf -- '--- last lines of %s ---\n' "$(rel "${LOGS}/${p}.log")"
    tail -n 25 "${LOGS}/${p}.log" | sed 's/^/    /'
    printf -- '---\n'
  } >&2
  exit 1
}

start_pillars() {
  local p
  : >"${PILLARS_FILE}"
  for p in "$@"; do
    log "starting kagenti-${p} (health :${HEALTH_PORT[$p]}, metrics :${METRICS_PORT[$p]})"
    hook "${p}" pre_start
    start_pillar "${p}"
    printf '%s %s\n' "${p}" "${HEALTH_PORT[$p]}" >>"${PILLARS_FILE}"
    hook "${p}" post_start
  done
}

source_hooks() {
  local p
  for p in "$@"; do
    if [[ -f "${ROOT}/hack/local/${p}.sh" ]]; then
      # shellcheck source=/dev/null
      source "${ROOT}/hack/local/${p}.sh"
    fi
  done
}

stop_pillars() {
  local f p pid entries=()
  for f in "${PIDS}"/*.pid; do
    [[ -f "${f}" ]] || continue
    p="$(basename "${f}" .pid)"
    if pid="$(recorded_pid "${f}")"; then
      entries+=("kagenti-${p}:${pid}")
    fi
    rm -f "${f}"
  done
  if ((${#entries[@]})); then
    log "stopping ${entries[*]%%:*}"
    stop_pids "${entries[@]}"
  fi
  rm -f "${PILLARS_FILE}"
}

# ---------------------------------------------------------------------------------------------------
# cluster

# require_tools builds what the cluster needs and bin/ lacks (a fresh clone has none of it):
# hack/tools.sh prints its progress, and skips what is already built at the wanted version.
require_tools() {
  local t missing=()
  for t in "${CLUSTER_TOOLS[@]}"; do [[ -x "${BIN}/${t}" ]] || missing+=("${t}"); done
  ((${#missing[@]} == 0)) && return 0
  log "bin/ lacks ${missing[*]}: building the local cluster's tools from the Go module proxy (the first time takes 10-40 min; then cached)"
  "${ROOT}/hack/tools.sh" local || die "building the local cluster's tools failed (hack/tools.sh local; see above)"
  for t in "${CLUSTER_TOOLS[@]}"; do [[ -x "${BIN}/${t}" ]] || die "hack/tools.sh local did not build bin/${t}"; done
}

create_cluster() {
  log "creating kwok cluster '${CLUSTER}' (KWOK_WORKDIR=$(rel "${KWOK_WORKDIR}"))"
  # --kubeconfig "" keeps kwokctl away from ~/.kube/config; ours is written below.
  if ! "${BIN}/kwokctl" create cluster --name "${CLUSTER}" --runtime binary --kubeconfig "" \
    --etcd-binary "${BIN}/etcd" \
    --kube-apiserver-binary "${BIN}/kube-apiserver" \
    --kube-controller-manager-binary "${BIN}/kube-controller-manager" \
    --kube-scheduler-binary "${BIN}/kube-scheduler" \
    --kwok-controller-binary "${BIN}/kwok" \
    --wait 60s >>"${KWOKCTL_LOG}" 2>&1; then
    tail -n 20 "${KWOKCTL_LOG}" | sed 's/^/    /' >&2
    die "kwokctl create cluster failed; full output in $(rel "${KWOKCTL_LOG}"), component logs in $(rel "${CLUSTER_DIR}")/logs"
  fi
  "${BIN}/kwokctl" get kubeconfig --name "${CLUSTER}" >"${KUBECONFIG}.tmp"
  mv "${KUBECONFIG}.tmp" "${KUBECONFIG}"
  local deadline=$((SECONDS + 60))
  until k get --raw /readyz >/dev/null 2>&1; do
    ((SECONDS < deadline)) || die "kube-apiserver not ready after 60s; logs in $(rel "${CLUSTER_DIR}")/logs"
    sleep 0.2
  done
}

create_node() {
  k apply --server-side --field-manager hack-local -f - >/dev/null <<EOF
apiVersion: v1
kind: Node
metadata:
  name: ${NODE}
  annotations:
    kwok.x-k8s.io/node: fake
    node.alpha.kubernetes.io/ttl: "0"
  labels:
    kubernetes.io/hostname: ${NODE}
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    type: kwok
spec:
  podCIDR: ${POD_CIDR}
  podCIDRs: [${POD_CIDR}]
status:
  allocatable: {cpu: "32", memory: 128Gi, pods: "250"}
  capacity: {cpu: "32", memory: 128Gi, pods: "250"}
EOF
  k wait --for=condition=Ready "node/${NODE}" --timeout=60s >/dev/null ||
    die "node ${NODE} did not become Ready; kwok controller log: $(rel "${CLUSTER_DIR}")/logs/kwok-controller.log"
}

install_crds() {
  local d n=0
  for d in "${ROOT}"/deploy/crds/*/; do
    [[ -d "${d}" ]] || continue
    if [[ -f "${d}/kustomization.yaml" ]]; then
      k apply --server-side --force-conflicts -k "${d}" >/dev/null
    else
      k apply --server-side --force-conflicts -f "${d}" >/dev/null
    fi
    n=$((n + 1))
  done
  if ((n == 0)); then
    log "no CRDs under deploy/crds yet"
    return 0
  fi
  k wait --for=condition=Established crd --all --timeout=60s >/dev/null
  log "installed the CRDs of ${n} pillar(s): $(k get crd -o name | sed 's|.*/||' | paste -sd' ')"
}

delete_cluster() {
  if [[ -d "${CLUSTER_DIR}" ]]; then
    # The PIDs as recorded before kwokctl deletes its files: a component the supervisor restarted is
    # not kwokctl's child, and kwokctl does not stop it.
    local f recorded=()
    for f in "${CLUSTER_DIR}"/pids/*.pid; do
      [[ -f "${f}" ]] && recorded+=("$(basename "${f}" .pid):$(<"${f}")")
    done
    if [[ -x "${BIN}/kwokctl" ]]; then
      log "deleting kwok cluster '${CLUSTER}'"
      "${BIN}/kwokctl" delete cluster --name "${CLUSTER}" >>"${KWOKCTL_LOG}" 2>&1 ||
        warn "kwokctl delete cluster failed (see $(rel "${KWOKCTL_LOG}")); stopping its components by PID"
    fi
    stop_cluster_leftovers "${recorded[@]}"
    rm -rf "${CLUSTER_DIR}"
  fi
  rm -f "${KUBECONFIG}"
}

# The control plane's supervisor (hack/local-supervise.sh): restarts a component that exits, such as
# kube-controller-manager and kube-scheduler after they lose their lease to an API server outage.
SUPERVISOR_PID="${LOCAL}/supervisor.pid"
SUPERVISOR_LOG="${LOGS}/control-plane.log"

start_supervisor() {
  rm -f "${SUPERVISOR_PID}"
  setsid bash -c 'echo $$ >"$0"; exec "$@"' "${SUPERVISOR_PID}" \
    bash "${ROOT}/hack/local-supervise.sh" "${CLUSTER_DIR}" "${SUPERVISOR_LOG}" </dev/null >/dev/null 2>&1 &
  for _ in $(seq 50); do
    [[ -s "${SUPERVISOR_PID}" ]] && return 0
    sleep 0.1
  done
  die "the control plane supervisor did not start (hack/local-supervise.sh)"
}

# stop_supervisor: before the cluster is deleted, so that a deliberate stop is not undone.
stop_supervisor() {
  local pid
  [[ -f "${SUPERVISOR_PID}" ]] || return 0
  pid="$(<"${SUPERVISOR_PID}")"
  if [[ "${pid}" =~ ^[0-9]+$ ]] && running "${pid}" &&
    tr '\0' ' ' <"/proc/${pid}/cmdline" 2>/dev/null | grep -q 'local-supervise.sh'; then
    stop_pids "supervisor:${pid}"
  fi
  rm -f "${SUPERVISOR_PID}"
}

# kwokctl records the PID of each component in <cluster dir>/pids/; stop any that survived.
stop_cluster_leftovers() {
  local entry pid entries=()
  for entry in "$@"; do
    pid=${entry#*:}
    [[ "${pid}" =~ ^[0-9]+$ ]] && running "${pid}" && entries+=("${entry}")
  done
  ((${#entries[@]} == 0)) || stop_pids "${entries[@]}"
}

# ---------------------------------------------------------------------------------------------------
# commands

up() {
  require_tools
  mkdir -p "${LOGS}" "${PIDS}"
  if [[ -d "${CLUSTER_DIR}" ]] || compgen -G "${PIDS}/*.pid" >/dev/null; then
    log "cleaning up the previous local cluster"
    down
    mkdir -p "${LOGS}" "${PIDS}"
  fi
  rm -f "${LOGS}"/*.log
  : >"${KWOKCTL_LOG}"

  local pillars=()
  mapfile -t pillars < <(available_pillars)
  check_ports "${pillars[@]}" # before anything starts: fail fast

  local t0=${SECONDS}
  create_cluster
  start_supervisor
  create_node
  install_crds
  # The e2e render check runs on the fresh cluster, before the local webhook registration (by URL)
  # exists: applying the manifests' service-based registration over it would merge into an invalid object.
  if ((RENDER_CHECK)); then render_check || RENDER_FAILED=1; fi
  source_hooks "${pillars[@]}"
  start_pillars "${pillars[@]}"
  summary_up "$((SECONDS - t0))" "${pillars[@]}"
}

summary_up() {
  local secs=$1 p server
  shift
  server="$(k config view --minify -o jsonpath='{.clusters[0].cluster.server}')"
  log "local cluster '${CLUSTER}' is up in ${secs}s: ${server}, node ${NODE} (pod IPs from ${POD_CIDR})"
  if (($# == 0)); then
    log "no pillar binaries in bin/ (build them with 'make build')"
  else
    for p in "$@"; do
      log "  kagenti-${p}  ready  health :${HEALTH_PORT[$p]}  metrics :${METRICS_PORT[$p]}  log $(rel "${LOGS}/${p}.log")"
    done
  fi
  log "export KUBECONFIG=$(rel "${KUBECONFIG}")   # stop everything with 'make down'"
}

down() {
  stop_pillars
  stop_supervisor
  delete_cluster
  rm -f "${KUBECONFIG}" "${KUBECONFIG}.tmp"
}

status() {
  local f p pid
  if [[ -d "${CLUSTER_DIR}" ]] && k get --raw /readyz >/dev/null 2>&1; then
    log "cluster '${CLUSTER}': up ($(k config view --minify -o jsonpath='{.clusters[0].cluster.server}'))"
  elif [[ -d "${CLUSTER_DIR}" ]]; then
    log "cluster '${CLUSTER}': stale (not answering); 'make down' cleans it up"
  else
    log "cluster '${CLUSTER}': not running"
  fi
  for f in "${PIDS}"/*.pid; do
    [[ -f "${f}" ]] || continue
    p="$(basename "${f}" .pid)"
    if pid="$(recorded_pid "${f}")"; then
      log "kagenti-${p}: running (pid ${pid})"
    else
      log "kagenti-${p}: not running (stale pid file)"
    fi
  done
}

apply_samples() {
  local dir="${ROOT}/deploy/samples" f out
  [[ -f "${dir}/weather-agent.yaml" ]] || die "deploy/samples/weather-agent.yaml is missing"
  k apply -f "${dir}/weather-agent.yaml" >/dev/null
  log "applied deploy/samples/weather-agent.yaml"
  for f in "${dir}"/*.yaml; do
    [[ "$(basename "${f}")" == weather-agent.yaml ]] && continue
    if out="$(k apply -f "${f}" 2>&1)"; then
      log "applied $(rel "${f}")"
    elif grep -qE 'no matches for kind|ensure CRDs are installed' <<<"${out}"; then
      warn "$(rel "${f}"): skipped what has no CRD installed yet:"
      grep -E 'no matches for kind|ensure CRDs are installed|(created|configured|unchanged)$' <<<"${out}" | sed 's/^/    /' >&2
    else
      printf '%s\n' "${out}" | sed 's/^/    /' >&2
      die "applying $(rel "${f}") failed"
    fi
  done
}

summary_run() {
  local rows
  if ! k -n agents rollout status deployment/weather-agent --timeout=120s >/dev/null; then
    k -n agents get pods -o wide >&2 || true
    die "the weather-agent Deployment did not roll out within 120s"
  fi
  rows="$(k -n agents get pods -l app=weather-agent -o go-template='{{range .items}}{{.metadata.name}}|{{.status.phase}}|{{.status.podIP}}|{{range $i, $c := .spec.initContainers}}{{if $i}},{{end}}{{$c.name}}{{end}}|{{range $i, $c := .spec.containers}}{{if $i}},{{end}}{{$c.name}}{{end}}
{{end}}')"
  printf '\n%sweather-agent (namespace agents)%s\n' "${BOLD}" "${RESET}"
  local name phase ip inits containers
  while IFS='|' read -r name phase ip inits containers; do
    [[ -n "${name}" ]] || continue
    printf '  %-34s %-8s %-12s containers: %s' "${name}" "${phase}" "${ip:-<no IP>}" "${containers}"
    [[ -n "${inits}" ]] && printf '  init containers: %s' "${inits}"
    printf '\n'
  done <<<"${rows}"
  local p _port
  if [[ -s "${PILLARS_FILE}" ]]; then
    while read -r p _port; do
      declare -F "${p}_summary" >/dev/null || continue
      printf '%s%s%s\n' "${BOLD}" "${p}" "${RESET}"
      "${p}_summary" | sed 's/^/  /'
    done <"${PILLARS_FILE}"
  fi
  printf '\n'
}

TAIL_PID=""
STREAMING=0
stream_logs() {
  local logs=()
  mapfile -t logs < <(compgen -G "${LOGS}/*.log" || true)
  if ((${#logs[@]} == 0)); then
    log "no pillar is running; the cluster stays up until Ctrl-C (KUBECONFIG=$(rel "${KUBECONFIG}"))"
    sleep infinity &
  else
    log "streaming $(rel "${LOGS}")/*.log — Ctrl-C stops everything (KUBECONFIG=$(rel "${KUBECONFIG}"))"
    tail -n 5 -F "${logs[@]}" &
  fi
  TAIL_PID=$!
  STREAMING=1
  wait "${TAIL_PID}" || true
}

# on_exit_down: the EXIT trap of run and e2e — always stop what was started.
on_exit_down() {
  local rc=$?
  trap '' INT TERM
  if [[ -n "${TAIL_PID}" ]]; then
    kill "${TAIL_PID}" 2>/dev/null || true
    wait "${TAIL_PID}" 2>/dev/null || true
  fi
  printf '\n' >&2
  down
  log "stopped"
  exit "${rc}"
}

# on_exit_up: `up` leaves nothing half-started behind when it fails (the logs stay in .local/logs).
on_exit_up() {
  local rc=$?
  ((rc == 0)) && return 0
  trap '' INT TERM
  log "up failed; stopping what it started (logs kept in $(rel "${LOGS}"))"
  down
  exit "${rc}"
}

RENDER_CHECK=0
RENDER_FAILED=0

render_check() {
  local overlay="${ROOT}/deploy/kustomize/overlays/all"
  [[ -f "${overlay}/kustomization.yaml" ]] || {
    log "render check: deploy/kustomize/overlays/all does not exist yet; skipped"
    return 0
  }
  local out
  # Server-side dry run cannot create the namespace it validates objects into, so create it for real.
  k apply -f "${ROOT}/deploy/kustomize/common/namespace.yaml" >/dev/null
  if out="$(k apply --server-side --dry-run=server -k "${overlay}" 2>&1)"; then
    log "render check: overlays/all is accepted by the API server ($(grep -c . <<<"${out}") objects, dry run)"
  else
    printf '%s\n' "${out}" | sed 's/^/    /' >&2
    warn "render check: kubectl apply --dry-run=server -k deploy/kustomize/overlays/all failed"
    return 1
  fi
}

cmd_up() {
  trap on_exit_up EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  up
}

cmd_run() {
  trap on_exit_down EXIT
  # Ctrl-C is how `run` is meant to end: clean up and exit 0 once streaming (130/143 before that).
  trap 'exit $((STREAMING ? 0 : 130))' INT
  trap 'exit $((STREAMING ? 0 : 143))' TERM
  up
  apply_samples
  summary_run
  stream_logs
}

# destructive_tests runs the tests that remove Kagenti from the cluster (kagenti uninstall); they
# skip themselves unless KAGENTI_E2E_DESTRUCTIVE=1, so they run only here, last, on a cluster that
# is deleted right after.
destructive_tests() {
  log "go test -count=1 -v -run '^TestDestructive' ./e2e/ $* (destructive: removes Kagenti from the cluster)"
  (cd "${ROOT}" && KAGENTI_E2E_DESTRUCTIVE=1 KAGENTI_E2E_KUBECONFIG="${KUBECONFIG}" KAGENTI_E2E_CLUSTER=local \
    go test -count=1 -v -run '^TestDestructive' ./e2e/ "$@")
}

cmd_e2e_destructive() {
  trap on_exit_down EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  up
  local rc=0
  destructive_tests "$@" || rc=$?
  log "e2e-destructive: $( ((rc == 0)) && echo passed || echo "FAILED (go test status ${rc})")"
  exit "${rc}"
}

cmd_e2e() {
  trap on_exit_down EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  RENDER_CHECK=1
  up
  local rc=0 render=${RENDER_FAILED}
  log "go test -count=1 -v ./e2e/... $*"
  (cd "${ROOT}" && KAGENTI_E2E_KUBECONFIG="${KUBECONFIG}" KAGENTI_E2E_CLUSTER=local \
    go test -count=1 -v ./e2e/... "$@") || rc=$?
  # Second phase, only for the whole suite: the destructive tests, after everything else passed.
  if ((rc == 0 && $# == 0)); then
    destructive_tests || rc=$?
  fi
  if ((rc != 0)); then
    log "e2e: FAILED (go test status ${rc})"
  elif ((render != 0)); then
    log "e2e: tests passed but the render check failed"
    rc=1
  else
    log "e2e: passed"
  fi
  exit "${rc}"
}

usage() {
  sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//' >&2
  exit 2
}

main() {
  local cmd="${1:-}"
  (($#)) && shift
  case "${cmd}" in
    up) cmd_up ;;
    down) down && log "down: nothing of the local cluster is running" ;;
    run) cmd_run ;;
    e2e) cmd_e2e "$@" ;;
    e2e-destructive) cmd_e2e_destructive "$@" ;;
    status) status ;;
    *) usage ;;
  esac
}

main "$@"
