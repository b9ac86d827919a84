#!/usr/bin/env bash
# The suites of `make test` once its tools are built: the generate check, lint and build, then unit,
# render and the local (kwok) e2e in the foreground, one after another, while the kind suite
# (hack/kind.sh) runs beside them from the start.
#
# Why beside: the kind suite spends most of its time waiting on a real cluster (kubeadm, image
# pulls, the kubelet's ConfigMap refresh, a Tekton build), while unit and the local e2e keep both
# CPUs busy. Run one after the other they took 38 min warm on this 2-core machine; side by side,
# docs/benchmarks.md has the figure. KAGENTI_TEST_SERIAL=1 runs them one after the other instead.
#
# The kind suite writes to .local/kind-suite.log; its stage lines are printed as they come (prefix
# "[kind suite]"), its whole log when it ends. A failing foreground suite stops the kind suite,
# whose own exit trap deletes the cluster and stops its engine (hack/kind-down.sh).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${ROOT}"
MAKE="${MAKE:-make}"

if [[ "${KAGENTI_TEST_SERIAL:-0}" == 1 ]]; then
  "${MAKE}" --no-print-directory verify-generate lint build unit render
  hack/local.sh e2e
  exec hack/kind.sh
fi

mkdir -p .local
LOG="${ROOT}/.local/kind-suite.log"
: > "${LOG}"
# The kind suite starts before the generate check, lint and build: on a cold machine its image
# builds are the longest path of `make test`, and the foreground has time to spare. Its tests run
# bin/kagenti, so it waits for this file (written once `make build` is done) before them.
BUILT="${ROOT}/.local/test-build.done"
rm -f "${BUILT}"
started=$(date +%s)
# A session of its own (setsid), so that stopping it reaches its go test and kind processes too.
KAGENTI_KIND_AFTER="${BUILT}" setsid hack/kind.sh > "${LOG}" 2>&1 < /dev/null &
kind_pid=$!
# The stage lines, live; tail stops by itself when the kind suite has ended.
tail -n +1 -F --pid="${kind_pid}" "${LOG}" 2>/dev/null |
  grep --line-buffered -E '\[kind\] (stage|error|warning)|^e2e-kind: skipped' | sed -u 's/^/[kind suite] /' >&2 &
tail_pid=$!

# stop_kind <why>: TERM to the kind suite's process group; its exit trap (hack/kind-down.sh) runs
# after its children have gone.
stop_kind() {
  if kill -0 "${kind_pid}" 2>/dev/null; then
    echo "[kind suite] stopping it ($1); it removes its cluster" >&2
    kill -TERM -- "-${kind_pid}" 2>/dev/null || true
  fi
  wait "${kind_pid}" 2>/dev/null || true
  wait "${tail_pid}" 2>/dev/null || true
}

# foreground <command>: runs a foreground suite in a session of its own and waits for it. bash runs
# a trap only once the command it waits on has ended, so a TERM sent to this script alone would
# wait for the whole suite; `wait` on a background job returns at once instead, and the trap stops
# the suite's process group (go test and the local cluster's processes with it).
fg_pid=""
foreground() {
  setsid "$@" < /dev/null &
  fg_pid=$!
  local r=0
  wait "${fg_pid}" || r=$?
  fg_pid=""
  return "${r}"
}
stop_foreground() {
  [[ -n "${fg_pid}" ]] || return 0
  echo "[test] stopping the foreground suites" >&2
  kill -TERM -- "-${fg_pid}" 2>/dev/null || true
  wait "${fg_pid}" 2>/dev/null || true
}
trap 'stop_foreground; stop_kind interrupted; exit 130' INT TERM

rc=0
foreground "${MAKE}" --no-print-directory verify-generate lint build || rc=$?
if [[ ${rc} -eq 0 ]]; then
  touch "${BUILT}"
  foreground "${MAKE}" --no-print-directory unit render || rc=$?
fi
if [[ ${rc} -eq 0 ]]; then foreground hack/local.sh e2e || rc=$?; fi
if [[ ${rc} -ne 0 ]]; then
  stop_kind "the foreground suites failed"
  echo "---- kind suite log (stopped): ${LOG#"${ROOT}/"} ----" >&2
  tail -n 100 "${LOG}" >&2
  exit "${rc}"
fi
foreground_done=$(date +%s)

krc=0
wait "${kind_pid}" || krc=$?
wait "${tail_pid}" 2>/dev/null || true
echo "---- kind suite log: ${LOG#"${ROOT}/"} ----"
cat "${LOG}"
echo "---- end of the kind suite log ----"
now=$(date +%s)
echo "[test] unit, render and local e2e: $((foreground_done - started)) s; the kind suite beside them: $((now - started)) s in all (exit ${krc})" >&2
exit "${krc}"
