#!/usr/bin/env bash
# The faults of kind-up that cost nothing to provoke, checked by `make e2e-kind` before it brings the
# cluster up (docs/kind.md, "Faults kind-up handles"): each must fail with its message and leave
# nothing behind. With the argument `running`, once the cluster is up: kind-up again must reuse it.
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

before_pid="$(dockerd_pid || true)"
expect_failure "too little space" "GiB free under" env KAGENTI_KIND_MIN_FREE_GIB=1000000 "${ROOT}/hack/kind-up.sh"
[[ "$(dockerd_pid || true)" == "${before_pid}" ]] || die "fault 'too little space': kind-up left a dockerd running"
