#!/usr/bin/env bash
# Keeps the local cluster's control plane running: kwokctl's binary runtime starts etcd,
# kube-apiserver, kube-controller-manager, kube-scheduler and the kwok controller as plain
# processes, and nothing restarts one that exits. kube-controller-manager and kube-scheduler exit
# by design when they lose their leader lease (an API server unreachable for longer than the lease's
# renew deadline, 10 s), and without them garbage collection, namespace deletion and scheduling stop
# silently. This script is the kubelet's part for them: it restarts a component that exited, with
# the same command line, working directory and log file, records the new PID where kwokctl keeps it
# (so `kwokctl delete cluster` and `hack/local.sh down` still find it), and logs why it restarted.
#
#   hack/local-supervise.sh <cluster dir> <log file>
#
# hack/local.sh starts it after the cluster is up and stops it (by its PID in .local/supervisor.pid)
# before it deletes the cluster, so a deliberate stop is never undone.
set -euo pipefail

CLUSTER_DIR=$1
LOG=$2
STATE="${CLUSTER_DIR}/supervisor"
POLL="${KAGENTI_SUPERVISE_POLL:-1}"  # seconds between checks
MAX_BACKOFF=30                       # seconds between restarts of a component that keeps exiting

mkdir -p "${STATE}"
say() { printf '%s %s\n' "$(date -u +%FT%TZ)" "$*" >>"${LOG}"; }

alive() { kill -0 "$1" 2>/dev/null && [[ "$(ps -o stat= -p "$1" 2>/dev/null)" != Z* ]]; }

# remember <name> <pid>: what it takes to start the component again, read from the running process.
remember() {
  local name=$1 pid=$2
  cp "/proc/${pid}/cmdline" "${STATE}/${name}.cmdline"
  readlink "/proc/${pid}/cwd" >"${STATE}/${name}.cwd"
  readlink "/proc/${pid}/fd/1" >"${STATE}/${name}.log" || : >"${STATE}/${name}.log"
}

# restart <name>: starts the remembered command line in a session of its own and sets started to
# its PID (the inner bash records its own PID and then execs the component, so the PID is the
# component's). No command substitution: its pipe would stay open in the long-lived component.
restart() {
  local name=$1 args=() cwd out pidfile="${STATE}/$1.newpid"
  mapfile -d '' -t args <"${STATE}/${name}.cmdline"
  cwd="$(<"${STATE}/${name}.cwd")"
  out="$(<"${STATE}/${name}.log")"
  [[ "${out}" == /* && -f "${out}" ]] || out="${CLUSTER_DIR}/logs/${name}.log"
  rm -f "${pidfile}"
  setsid bash -c 'cd "$1" && echo $$ >"$0" && exec "${@:2}"' "${pidfile}" "${cwd}" "${args[@]}" \
    >>"${out}" 2>&1 </dev/null &
  started=""
  for _ in $(seq 50); do
    [[ -s "${pidfile}" ]] && started="$(<"${pidfile}")" && return 0
    sleep 0.1
  done
  say "${name}: no PID recorded by its restart within 5s"
  return 1
}

# last_words <name>: the component's last log line that explains an exit, else its last line.
last_words() {
  local out; out="$(<"${STATE}/$1.log")"
  [[ -f "${out}" ]] || return 0
  tail -n 50 "${out}" | grep -E '^[FE][0-9]{4} |leaderelection lost|[Ff]atal|panic' | tail -n 1 ||
    tail -n 1 "${out}"
}

declare -A pid backoff next
for f in "${CLUSTER_DIR}"/pids/*.pid; do
  [[ -f "${f}" ]] || continue
  name="$(basename "${f}" .pid)"
  p="$(<"${f}")"
  alive "${p}" || continue
  remember "${name}" "${p}"
  pid[${name}]=${p}
  backoff[${name}]=1
  next[${name}]=0
done
say "supervising ${!pid[*]}"

trap 'say "supervisor stopped"; exit 0' TERM INT
while :; do
  for name in "${!pid[@]}"; do
    p=${pid[${name}]}
    if alive "${p}"; then
      # Running for a while again: a later exit starts from the shortest backoff.
      ((SECONDS < next[${name}] + 60)) || backoff[${name}]=1
      continue
    fi
    ((SECONDS >= next[${name}])) || continue
    say "${name} (pid ${p}) exited: $(last_words "${name}")"
    next[${name}]=$((SECONDS + backoff[${name}]))
    if restart "${name}"; then
      pid[${name}]=${started}
      # The log line first: whoever sees the new PID file can already read why it changed.
      say "restarted ${name} as pid ${started} (next restart no sooner than ${backoff[${name}]}s)"
      echo "${started}" >"${CLUSTER_DIR}/pids/${name}.pid"
    fi
    backoff[${name}]=$((backoff[${name}] * 2 > MAX_BACKOFF ? MAX_BACKOFF : backoff[${name}] * 2))
  done
  sleep "${POLL}" &
  wait $! || true
done
