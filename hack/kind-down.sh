#!/usr/bin/env bash
# make kind-down: deletes the kind cluster, stops the dockerd kind-up started (by the PID in its
# pidfile) and puts back what it changed on the host (sysctls, bridges, the FORWARD policy). The
# engine's images stay under .local/kind/ and the build cache in ~/.cache/kagenti/kind (lib.sh: CACHE)
# for the next kind-up; `--purge` removes both.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/kind/lib.sh"
export PATH="${BIN}:${PATH}"

[[ $(id -u) -eq 0 ]] || die "kind-down stops a root dockerd: run it as root"
if pid="$(dockerd_pid)"; then
  if docker info >/dev/null 2>&1; then
    if docker inspect "${CLUSTER}-control-plane" >/dev/null 2>&1 ||
      [[ -n "$(docker ps -aq --filter "label=io.x-k8s.kind.cluster=${CLUSTER}")" ]]; then
      log "deleting cluster ${CLUSTER}"
      kind delete cluster --name "${CLUSTER}" >/dev/null 2>&1 ||
        docker rm -f $(docker ps -aq --filter "label=io.x-k8s.kind.cluster=${CLUSTER}") >/dev/null
    fi
    docker network rm kind >/dev/null 2>&1 || true
  else
    warn "dockerd (pid ${pid}) does not answer; stopping it without deleting the cluster first"
  fi
else
  log "dockerd is not running (nothing of the cluster is left running)"
fi
stop_dockerd
rm -f "${KIND_KUBECONFIG}"
rm -rf "${WORK}/node-build" "${WORK}/preload-run" "${WORK}/preload.tar" "${WORK}"/ctx.*
if [[ "${1:-}" == --purge ]]; then
  log "removing the engine's state (${WORK}) and the build cache (${CACHE})"
  rm -rf "${WORK}" "${CACHE}"
fi
