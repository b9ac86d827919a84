#!/usr/bin/env bash
# make e2e-kind: the e2e suite on the kind cluster of `make kind-up` (docs/kind.md).
#   up (hack/kind-up.sh) → our images (hack/images.sh, on kind-up's engine) → loaded into the nodes →
#   the platform installed as a user would (CRDs, then kustomize overlays) → where agentbuild is
#   installed, Tekton Pipelines, an in-cluster registry and git server (hack/kind/tekton.sh) → go
#   test ./e2e/ with KAGENTI_E2E_CLUSTER=kind → down (hack/kind-down.sh), always.
#
# Skips (exit 0, saying why) where no engine can be started here: not root. KAGENTI_KIND_REQUIRED=1
# turns a skip into a failure (for CI). KAGENTI_KIND_KEEP=1 leaves the cluster up afterwards.
# KAGENTI_KIND_INSTALL is how the platform is installed: helm (default: the umbrella chart, every
# pillar, netpol on, the dev IdP of hack/kind/dev-idp.yaml as the injector's IdP) or kustomize (the
# <pillar>-only overlays of KAGENTI_KIND_PILLARS).
# KAGENTI_KIND_PILLARS (default: all six) are the pillars whose images are built (and, with
# kustomize, installed);
# KAGENTI_KIND_RUN the go test -run pattern (default: the tests that need a real cluster, and netpol's).
# Besides the pillars' images, the suite's pods run kagenti-authbridge (injected), the federation's
# member agent alone, the dev IdP, the stand-in agent, the example telemetry agent and an OTLP
# receiver (hack/images.sh authbridge agentcard-federation-member dev-idp e2e-agent agent-telemetry
# otlp-sink), and SPIRE (hack/kind/spire.yaml: server, agent on
# every worker, its socket on the node) with spiffe-helper for the injector (hack/images.sh
# spire-server spire-agent spiffe-helper, the upstream programs of bin/ on a glibc base).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/kind/lib.sh"
export PATH="${BIN}:${PATH}"
INSTALL="${KAGENTI_KIND_INSTALL:-helm}"
PILLARS=(${KAGENTI_KIND_PILLARS:-agentbuild agentcard agenttrace injector netpol tokenexchange})
PROGRAMS=(authbridge agentcard-federation-member dev-idp e2e-agent agent-telemetry otlp-sink)
UPSTREAM=(spire-server spire-agent spiffe-helper)
tools_version() { sed -n "s/^$1=//p" "${ROOT}/hack/tools.sh"; }
SPIRE_IMAGE_TAG="$(tools_version SPIRE_VERSION)"
SPIFFE_HELPER_IMAGE="kagenti.local/spiffe-helper:$(tools_version SPIFFE_HELPER_VERSION)"
RUN="${KAGENTI_KIND_RUN:-^(TestKind|TestNetpol)}"

skip() {
  if [[ "${KAGENTI_KIND_REQUIRED:-0}" == 1 ]]; then
    die "e2e-kind cannot run here ($*) and KAGENTI_KIND_REQUIRED=1"
  fi
  echo "e2e-kind: skipped — $*"
  exit 0
}
[[ $(id -u) -eq 0 ]] || skip "kind-up starts its own dockerd and needs root"

stage faults
"${KIND_DIR}/faults.sh"

WITH_TEKTON=0
[[ " ${PILLARS[*]} " == *" agentbuild "* ]] && WITH_TEKTON=1

stage up
[[ "${KAGENTI_KIND_KEEP:-0}" == 1 ]] || trap '"${ROOT}/hack/kind-down.sh"' EXIT
"${KIND_DIR}/faults.sh" engine
# The images are built on the engine while kind-up makes the node image and the cluster, which is
# mostly waiting (kubeadm, the nodes' kubelets): ours, and Tekton's where agentbuild is installed.
# Their output goes to a log of each, shown when a build fails.
build_in_background() {
  local name=$1
  shift
  "$@" > "${WORK}/${name}.log" 2>&1 &
  BACKGROUND[${name}]=$!
}
# wait_for <name>: the background build's exit status; its log when it failed.
wait_for() {
  if wait "${BACKGROUND[$1]}"; then
    sed -n "s/\[kind\] stage \(.*\)/[kind] ($1) stage \1/p" "${WORK}/$1.log" >&2
    return 0
  fi
  cat "${WORK}/$1.log" >&2
  die "$1 failed (log above: ${WORK#"${ROOT}/"}/$1.log)"
}
declare -A BACKGROUND=()
# Our images, the node image's programs and Tekton's share client-go and its closure (hack/align.sh):
# compiled once here, or each of the three builds below would compile it at the same time.
"${ROOT}/hack/align.sh" --compile
build_in_background images "${ROOT}/hack/images.sh" "${PILLARS[@]}" "${PROGRAMS[@]}" "${UPSTREAM[@]}"
((WITH_TEKTON)) && build_in_background tekton-images "${KIND_DIR}/tekton.sh" images
"${KIND_DIR}/faults.sh" interrupted
"${ROOT}/hack/kind-up.sh"
"${KIND_DIR}/faults.sh" running

stage images
wait_for images
shell_image="$(docker images --format '{{.Repository}}:{{.Tag}}' kagenti.local/kind-base | head -n 1)"
[[ -n "${shell_image}" ]] || die "no kagenti.local/kind-base image on kind-up's engine"
images=("${shell_image}")
for p in "${PILLARS[@]}" "${PROGRAMS[@]}"; do images+=("ghcr.io/kagenti/kagenti-${p}:v0.1.0"); done
images+=("kagenti.local/spire-server:${SPIRE_IMAGE_TAG}" "kagenti.local/spire-agent:${SPIRE_IMAGE_TAG}" "${SPIFFE_HELPER_IMAGE}")
if ((WITH_TEKTON)); then
  wait_for tekton-images
  mapfile -t tekton_images < "${WORK}/tekton-images.txt"
  images+=("${tekton_images[@]}")
fi
# One load (one image archive) of them all.
load_into_workers "${images[@]}"

export KUBECONFIG="${KIND_KUBECONFIG}"
# Tekton, the registry and the git server come up beside SPIRE and the platform (hack/kind/tekton.sh).
((WITH_TEKTON)) && build_in_background tekton-install "${KIND_DIR}/tekton.sh" install
stage spire
sed -e "s|image: IMAGE_SERVER|image: kagenti.local/spire-server:${SPIRE_IMAGE_TAG}|" \
  -e "s|image: IMAGE_AGENT|image: kagenti.local/spire-agent:${SPIRE_IMAGE_TAG}|" "${KIND_DIR}/spire.yaml" |
  kubectl apply --server-side -f - >/dev/null
kubectl -n spire-system rollout status statefulset/spire-server --timeout=180s >/dev/null &&
  kubectl -n spire-system rollout status daemonset/spire-agent --timeout=180s >/dev/null ||
  { kubectl -n spire-system get pods -o wide >&2; kubectl -n spire-system logs --all-containers --tail 30 -l 'app.kubernetes.io/name in (spire-server,spire-agent)' >&2 || true; die "SPIRE did not become ready"; }
# The platform's own SPIFFE identities, registered as an operator would before installing it:
# kagenti-tokenexchange registers jwtSVID clients with its SVID, kagenti-agentcard fetches cards
# over mutual TLS with its own (helm tokenexchange.registrar, agentcard.attestedFetch). Both under
# the node alias of every agent of this cluster (the tests register theirs the same way).
spire_server() { kubectl -n spire-system exec spire-server-0 -c spire-server -- /spire-server "$@"; }
alias_id=spiffe://cluster.local/kagenti/kind-nodes
spire_server entry show -spiffeID "${alias_id}" | grep -q 'Entry ID' ||
  spire_server entry create -node -spiffeID "${alias_id}" -selector k8s_psat:cluster:kagenti >/dev/null ||
  die "spire-server entry create ${alias_id} failed"
for sa in kagenti-tokenexchange kagenti-agentcard; do
  id="spiffe://cluster.local/ns/kagenti-system/sa/${sa}"
  spire_server entry show -spiffeID "${id}" | grep -q 'Entry ID' ||
    spire_server entry create -parentID "${alias_id}" -spiffeID "${id}" -selector k8s:ns:kagenti-system -selector "k8s:sa:${sa}" >/dev/null ||
    die "spire-server entry create ${id} failed"
done

stage install
case "${INSTALL}" in
helm)
  # As a user would: one helm install of the umbrella chart (its subcharts install the CRDs).
  ensure_namespace kagenti-system
  sed "s|image: IMAGE|image: ghcr.io/kagenti/kagenti-dev-idp:v0.1.0|" "${KIND_DIR}/dev-idp.yaml" | kubectl apply -f - >/dev/null
  helm upgrade --install kagenti "${ROOT}/deploy/helm/kagenti" --namespace kagenti-system \
    --set netpol.enabled=true \
    --set injector.config.spireSocket.type=hostPath --set injector.config.spireSocket.hostPath=/run/spire/agent-sockets \
    --set "injector.config.images.spiffeHelper=${SPIFFE_HELPER_IMAGE}" \
    --set injector.config.identity.idpURL=http://kagenti-dev-idp.kagenti-system.svc:9080 \
    --set tokenexchange.registrar.enabled=true --set tokenexchange.registrar.spiffeSocket.type=hostPath \
    --set agentcard.attestedFetch.enabled=true --set agentcard.attestedFetch.spiffeSocket.type=hostPath >/dev/null
  ;;
kustomize)
  for d in "${ROOT}"/deploy/crds/*/; do kubectl apply --server-side -k "${d}" >/dev/null; done
  for p in "${PILLARS[@]}"; do
    kubectl apply --server-side -k "${ROOT}/deploy/kustomize/overlays/${p}-only" >/dev/null
  done
  ;;
*) die "KAGENTI_KIND_INSTALL is ${INSTALL}; it is helm or kustomize" ;;
esac
kubectl -n kagenti-system wait --for=condition=Available deploy --all --timeout=180s >/dev/null ||
  { kubectl -n kagenti-system get pods -o wide >&2; kubectl -n kagenti-system describe pods >&2; die "the platform did not become available"; }

build_tools_image=""
if ((WITH_TEKTON)); then
  stage tekton
  wait_for tekton-install
  build_tools_image="$(sed -n 's/^KAGENTI_E2E_BUILD_TOOLS_IMAGE=//p' "${WORK}/tekton.env")"
fi

stage test
# Under `make test` the suite starts before `make build` (hack/test.sh), and its tests run
# bin/kagenti: KAGENTI_KIND_AFTER names the file that says the build is done.
if [[ -n "${KAGENTI_KIND_AFTER:-}" && ! -e "${KAGENTI_KIND_AFTER}" ]]; then
  log "waiting for make build (bin/kagenti) in the foreground"
  until [[ -e "${KAGENTI_KIND_AFTER}" ]]; do sleep 2; done
fi
# go test of the suite on this cluster: go_test <go test flags>...
go_test() {
  (cd "${ROOT}/e2e" && KAGENTI_E2E_KUBECONFIG="${KIND_KUBECONFIG}" KAGENTI_E2E_CLUSTER=kind \
    KAGENTI_E2E_BUILD_TOOLS_IMAGE="${build_tools_image}" KAGENTI_E2E_SHELL_IMAGE="${shell_image}" go test -count=1 -v "$@")
}
rc=0
# The AgentBuild test (a Tekton build of minutes, in namespaces of its own, touching no pillar's
# settings) runs in a second go test beside the others.
BUILD_TEST='^TestKindAgentBuildOnTekton$'
if ((WITH_TEKTON)) && [[ -z "${KAGENTI_KIND_RUN:-}" ]]; then
  go_test -timeout 20m -run "${BUILD_TEST}" . > "${WORK}/test-agentbuild.log" 2>&1 &
  build_test=$!
  go_test -timeout 20m -run "${RUN}" -skip "${BUILD_TEST}" ./... || rc=$?
  brc=0
  wait "${build_test}" || brc=$?
  echo "---- ${BUILD_TEST} (beside the others): ----"
  cat "${WORK}/test-agentbuild.log"
  ((brc == 0)) || rc=${brc}
else
  go_test -timeout 20m -run "${RUN}" ./... || rc=$?
fi
# Second phase, last because it removes Kagenti: `kagenti uninstall` with workload continuity on
# real pods (the cluster is thrown away afterwards).
if [[ ${rc} -eq 0 && -z "${KAGENTI_KIND_RUN:-}" ]]; then
  stage destructive
  (cd "${ROOT}/e2e" && KAGENTI_E2E_KUBECONFIG="${KIND_KUBECONFIG}" KAGENTI_E2E_CLUSTER=kind KAGENTI_E2E_DESTRUCTIVE=1 \
    KAGENTI_E2E_SHELL_IMAGE="${shell_image}" go test -count=1 -v -timeout 15m -run '^TestDestructiveUninstall$' .) || rc=$?
fi
stage done
exit "${rc}"
