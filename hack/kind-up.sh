#!/usr/bin/env bash
# make kind-up: a real three-node kind cluster (one control plane, two workers) on this machine, with
# no container registry. Installs the Debian packages it needs when they are missing, starts its own
# dockerd (state under .local/kind/, no iptables rules, no forwarding, no docker0), builds the node
# image and the component images from pinned sources (cached: a second run builds nothing), creates
# the cluster and installs kube-router (pod network, NetworkPolicy enforcement).
#
#   hack/kind-up.sh          up (idempotent: an up-to-date running cluster is kept)
#   hack/kind-up.sh --image  build the node image only
#   hack/kind-up.sh --engine start the engine only (hack/kind.sh builds images on it beside the rest)
#   hack/kind-up.sh --clean  the node image, then delete a cluster kind-up would not keep (left by an
#                            interrupted run, or on another node image), and stop there
#
# The kubeconfig is .local/kind/kubeconfig. `make kind-down` undoes all of it. docs/kind.md.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/kind/lib.sh"
source "${KIND_DIR}/build.sh"
export PATH="${BIN}:${PATH}"

[[ $(id -u) -eq 0 ]] || die "kind-up runs dockerd, debootstrap and chroot: run it as root"
[[ -n "${KUBE_VERSION}" && -n "${KIND_VERSION}" ]] || die "hack/tools.sh names no KUBE_VERSION or KIND_VERSION"
mkdir -p "${CACHE}" "${WORK}"
# One build at a time per cache: a second clone's kind-up waits here rather than debootstrap into
# the same directory.
exec 9>"${CACHE}/.lock"
flock -w 3600 9 || die "another kind-up has held ${CACHE}/.lock for an hour"

# free_gib <dir>: GiB free on the filesystem holding dir.
free_gib() { df -BG --output=avail "$1" | tail -n 1 | tr -dc '0-9'; }

STARTED_DOCKERD=0 CREATING_CLUSTER=0
# On failure: what this run started goes away again (a partial cluster, the dockerd it started).
on_exit() {
  local rc=$?
  [[ ${rc} -eq 0 ]] && return 0
  warn "kind-up failed (exit ${rc}); undoing what it started"
  if dockerd_pid >/dev/null; then
    # Only a cluster this run was making: a failure before that (too little space, say) leaves a
    # running cluster alone.
    [[ ${CREATING_CLUSTER} -eq 0 ]] || kind delete cluster --name "${CLUSTER}" >/dev/null 2>&1 || true
    if [[ ${STARTED_DOCKERD} -eq 1 ]]; then
      docker network rm kind >/dev/null 2>&1 || true
      stop_dockerd
    fi
  fi
  rm -rf "${WORK}/node-build" "${WORK}/preload-run" "${WORK}/preload.tar" "${WORK}"/ctx.*
}
trap on_exit EXIT

stage packages
ensure_host_packages

stage engine
for d in "${WORK}" "${CACHE}"; do
  avail="$(free_gib "${d}")"
  ((avail >= MIN_FREE_GIB)) || die "only ${avail} GiB free under ${d}; kind-up needs ${MIN_FREE_GIB} GiB (KAGENTI_KIND_MIN_FREE_GIB) for the engine's images, the build cache and the node build"
done
dockerd_pid >/dev/null || STARTED_DOCKERD=1
start_dockerd
[[ "${1:-}" == --engine ]] && { stage done; exit 0; }

stage node-image
need_tools
build_node_image
IMAGE="$(node_image)"
[[ "${1:-}" == --image ]] && { stage done; exit 0; }

stage cluster
# cluster_image: the node image of the running cluster's control plane, empty when there is none.
cluster_image() { docker inspect -f '{{.Config.Image}}' "${CLUSTER}-control-plane" 2>/dev/null || true; }
existing="$(cluster_image)"
if [[ -n "${existing}" && "${existing}" != "${IMAGE}" ]]; then
  log "cluster ${CLUSTER} runs node image ${existing}, not the current ${IMAGE}: deleting it"
  kind delete cluster --name "${CLUSTER}"
  existing=""
fi
if [[ -n "${existing}" ]] && ! kubectl --kubeconfig "${KIND_KUBECONFIG}" get --raw /readyz >/dev/null 2>&1; then
  log "cluster ${CLUSTER} is left from an interrupted run (its API server does not answer): deleting it"
  kind delete cluster --name "${CLUSTER}"
  existing=""
fi
# Containers of the cluster without a control plane (an interrupted create) go too.
stale="$(docker ps -aq --filter "label=io.x-k8s.kind.cluster=${CLUSTER}")"
if [[ -z "${existing}" && -n "${stale}" ]]; then
  log "removing containers left by an interrupted create of ${CLUSTER}"
  docker rm -f ${stale} >/dev/null
fi
[[ "${1:-}" == --clean ]] && { stage done; exit 0; }
if [[ -z "${existing}" ]]; then
  # kind's network, made here as IPv4 only: kind's own would ask for IPv6 forwarding on the host.
  docker network inspect kind >/dev/null 2>&1 ||
    docker network create --driver bridge -o com.docker.network.bridge.enable_ip_masquerade=false kind >/dev/null
  CREATING_CLUSTER=1
  log "creating cluster ${CLUSTER} (1 control plane, 2 workers) from ${IMAGE}"
  kind create cluster --name "${CLUSTER}" --image "${IMAGE}" --config "${KIND_DIR}/cluster.yaml" \
    --kubeconfig "${KIND_KUBECONFIG}" --wait 0s
else
  log "cluster ${CLUSTER} is up on ${IMAGE}; keeping it"
fi

stage network
export KUBECONFIG="${KIND_KUBECONFIG}"
sed "s|image: IMAGE|image: $(kube_router_image)|" "${KIND_DIR}/kube-router.yaml" | kubectl apply --server-side -f - >/dev/null
kubectl -n kube-system rollout status daemonset/kube-router --timeout=180s >/dev/null ||
  { kubectl -n kube-system get pods -o wide >&2; die "kube-router did not become ready"; }
kubectl wait --for=condition=Ready node --all --timeout=180s >/dev/null ||
  { kubectl get nodes -o wide >&2; die "the nodes did not become Ready"; }
kubectl -n kube-system rollout status deployment/coredns --timeout=180s >/dev/null ||
  { kubectl -n kube-system get pods -o wide >&2; die "CoreDNS did not become ready"; }
stage done
kubectl get nodes -o wide >&2
log "cluster ${CLUSTER} is up: export KUBECONFIG=${KIND_KUBECONFIG}; DOCKER_HOST=${DOCKER_HOST}"
