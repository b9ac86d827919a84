#!/usr/bin/env bash
# The faults of kind-up that cost nothing to provoke, checked by `make e2e-kind` before it brings the
# cluster up (docs/kind.md, "Faults kind-up handles"): each must fail with its message and leave
# nothing behind. With the argument `interrupted`, before the cluster is made: the containers of an
# interrupted create must be cleaned up. With `running`, once the cluster is up: kind-up again must
# reuse it.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

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
    log "fault 'a cluster left by an interrupted run': not provoked (cluster ${CLUSTER} exists and is kept)"
    exit 0
  fi
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

before_pid="$(dockerd_pid || true)"
expect_failure "too little space" "GiB free under" env KAGENTI_KIND_MIN_FREE_GIB=1000000 "${ROOT}/hack/kind-up.sh"
[[ "$(dockerd_pid || true)" == "${before_pid}" ]] || die "fault 'too little space': kind-up left a dockerd running"
