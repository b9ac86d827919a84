#!/usr/bin/env bash
# The faults of kind-up that cost nothing to provoke, checked by `make e2e-kind` before it brings the
# cluster up (docs/kind.md, "Faults kind-up handles"): each must fail with its message and leave
# nothing behind. With the argument `engine`, it starts the engine of the run beside a dockerd that
# is not ours. With `interrupted`, before the cluster is made: a cluster on another node image, and
# the containers of an interrupted create, must be cleaned up. With `running`, once the cluster is
# up: kind-up again must reuse it.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# fake_dockerd <dir>: starts a process that is named dockerd (a copy of sleep at <dir>/dockerd) and
# is no engine, as a child of this shell (so that it is reaped); its PID in FAKE_PID.
fake_dockerd() {
  cp "$(command -v sleep)" "$1/dockerd"
  "$1/dockerd" 600 >/dev/null 2>&1 &
  FAKE_PID=$!
}
# stop_fake <dir>: stops the process fake_dockerd started and removes its directory.
stop_fake() {
  kill "${FAKE_PID}" 2>/dev/null || true
  wait "${FAKE_PID}" 2>/dev/null || true
  rm -rf "$1"
}

# expect_failure <what> <message pattern> <command>...: the command fails, printing the pattern.
expect_failure() {
  local what=$1 pattern=$2 out
  shift 2
  if out="$("$@" 2>&1)"; then die "fault '${what}': kind-up succeeded"; fi
  grep -q -- "${pattern}" <<<"${out}" || die "fault '${what}': kind-up failed without saying '${pattern}':"$'\n'"${out}"
  log "fault '${what}': refused as it should be ($(grep -m1 -o -- "${pattern}.*" <<<"${out}" | cut -c1-100))"
}

# faults.sh running: with the cluster up, kind-up again reuses our dockerd and the cluster (the
# rows "our dockerd already running" and a cluster that answers), without touching them.
if [[ "${1:-}" == running ]]; then
  pid="$(dockerd_pid)"
  out="$("${ROOT}/hack/kind-up.sh" 2>&1)" || die "fault 'kind-up on a running cluster': it failed:"$'\n'"${out}"
  for pattern in "dockerd already running (pid ${pid}, ours)" "is up on .*; keeping it"; do
    grep -q -- "${pattern}" <<<"${out}" || die "fault 'kind-up on a running cluster': it did not say '${pattern}':"$'\n'"${out}"
  done
  [[ "$(dockerd_pid)" == "${pid}" ]] || die "fault 'kind-up on a running cluster': dockerd was restarted"
  log "fault 'kind-up on a running cluster': dockerd (pid ${pid}) and the cluster reused"
  exit 0
fi

# faults.sh interrupted: before the cluster is made, leave what an interrupted `kind create` leaves
# (the cluster's node containers made, never started: no API server answers) and kind-up must
# delete that cluster and make it again (the row "a cluster left by an interrupted run"). It costs
# no cluster of its own: the one made here is the run's. A cluster that already exists is kept.
if [[ "${1:-}" == interrupted ]]; then
  source "${KIND_DIR}/build.sh"
  out="$("${ROOT}/hack/kind-up.sh" --image 2>&1)" || die "fault 'a cluster left by an interrupted run': building the node image failed:"$'\n'"${out}"
  if [[ -n "$(docker ps -aq --filter "label=io.x-k8s.kind.cluster=${CLUSTER}")" ]]; then
    log "faults 'a cluster on another node image', 'a cluster left by an interrupted run': not provoked (cluster ${CLUSTER} exists and is kept)"
    exit 0
  fi
  # A cluster on another node image (its control plane's image tagged as an older version, never
  # started): kind-up --clean must delete it, and nothing of it may be left.
  other="kagenti.local/kind-node:v0.0.0-fault"
  docker tag "$(node_image)" "${other}"
  docker create --name "${CLUSTER}-control-plane" --label "io.x-k8s.kind.cluster=${CLUSTER}" --label "io.x-k8s.kind.role=control-plane" "${other}" >/dev/null
  out="$("${ROOT}/hack/kind-up.sh" --clean 2>&1)" || die "fault 'a cluster on another node image': kind-up --clean failed:"$'\n'"${out}"
  docker rmi "${other}" >/dev/null
  grep -q -- "runs node image ${other}, not the current" <<<"${out}" || die "fault 'a cluster on another node image': kind-up did not say so:"$'\n'"${out}"
  [[ -z "$(docker ps -aq --filter "label=io.x-k8s.kind.cluster=${CLUSTER}")" ]] ||
    die "fault 'a cluster on another node image': its containers are left"
  log "fault 'a cluster on another node image': deleted ($(grep -m1 -o -- "runs node image.*" <<<"${out}" | cut -c1-100))"
  for role in control-plane worker; do
    docker create --name "${CLUSTER}-${role}" --label "io.x-k8s.kind.cluster=${CLUSTER}" --label "io.x-k8s.kind.role=${role}" "$(node_image)" >/dev/null
  done
  out="$("${ROOT}/hack/kind-up.sh" 2>&1)" || die "fault 'a cluster left by an interrupted run': kind-up failed:"$'\n'"${out}"
  grep -q -- "is left from an interrupted run" <<<"${out}" || die "fault 'a cluster left by an interrupted run': kind-up did not say so:"$'\n'"${out}"
  [[ -z "$(docker ps -aq --filter status=created --filter "label=io.x-k8s.kind.cluster=${CLUSTER}")" ]] ||
    die "fault 'a cluster left by an interrupted run': containers of the interrupted create are left"
  log "fault 'a cluster left by an interrupted run': deleted and made again ($(grep -m1 -o -- "is left from an interrupted run.*" <<<"${out}" | cut -c1-100))"
  exit 0
fi

# faults.sh engine: the run's engine, started while a dockerd that is not ours runs (a stand-in for
# the system's: a process of that name): kind-up must say so and start its own beside it, never
# using or stopping that one. With our engine already running, kind-up reuses it.
if [[ "${1:-}" == engine ]]; then
  if dockerd_pid >/dev/null; then
    exec "${ROOT}/hack/kind-up.sh" --engine
  fi
  dir="$(mktemp -d)"
  fake_dockerd "${dir}"
  other=${FAKE_PID}
  trap 'stop_fake "${dir}"' EXIT
  out="$("${ROOT}/hack/kind-up.sh" --engine 2>&1)" || die "fault 'a dockerd of the system running': kind-up failed:"$'\n'"${out}"
  printf '%s\n' "${out}" >&2
  kill -0 "${other}" 2>/dev/null || die "fault 'a dockerd of the system running': kind-up stopped it"
  grep -q -- "another dockerd runs on this machine (pid .*${other}" <<<"${out}" || die "fault 'a dockerd of the system running': kind-up did not say so:"$'\n'"${out}"
  ours="$(dockerd_pid)" || die "fault 'a dockerd of the system running': our dockerd is not running"
  [[ "${ours}" != "${other}" ]] || die "fault 'a dockerd of the system running': kind-up took it for ours"
  log "fault 'a dockerd of the system running': ours (pid ${ours}) started beside it, on ${DOCKER_SOCK#"${ROOT}/"}"
  exit 0
fi

before_pid="$(dockerd_pid || true)"
expect_failure "too little space" "GiB free under" env KAGENTI_KIND_MIN_FREE_GIB=1000000 "${ROOT}/hack/kind-up.sh"
[[ "$(dockerd_pid || true)" == "${before_pid}" ]] || die "fault 'too little space': kind-up left a dockerd running"
if [[ -n "${before_pid}" ]]; then
  log "faults 'path too long', 'our dockerd not answering': not provoked (our dockerd, pid ${before_pid}, runs)"
  exit 0
fi
# The repository reached through a path too long for dockerd's sockets (a symbolic link to it).
long="$(mktemp -d)/$(printf 'k%.0s' {1..90})"
ln -s "${ROOT}" "${long}"
expect_failure "path too long" "the repository path is too long for dockerd's sockets" "${long}/hack/kind-up.sh" --engine
rm -rf "$(dirname "${long}")"
[[ -z "$(dockerd_pid || true)" ]] || die "fault 'path too long': kind-up left a dockerd running"
# Our pidfile names a live dockerd that does not answer on our socket (here: a process of that name
# that is no engine): kind-up must stop and say what to do, and leave that process alone.
dir="$(mktemp -d)"
fake_dockerd "${dir}"
hung=${FAKE_PID}
trap 'stop_fake "${dir}"; rm -f "${DOCKERD_PID}"' EXIT
mkdir -p "${WORK}"
printf '%s\n' "${hung}" > "${DOCKERD_PID}"
expect_failure "our dockerd not answering" "does not answer on .*run 'make kind-down' and retry" "${ROOT}/hack/kind-up.sh" --engine
kill -0 "${hung}" 2>/dev/null || die "fault 'our dockerd not answering': kind-up killed the process"
