#!/usr/bin/env bash
# Runs the e2e suite on a kind cluster. Needs a Docker engine; says so and exits 0 without one.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${ROOT}/bin"
CLUSTER="${KIND_CLUSTER:-kagenti-e2e}"
if ! docker info >/dev/null 2>&1; then
  echo "e2e-kind: skipped — no Docker engine reachable (docker info failed); the same suite runs on the local cluster with 'make e2e'"
  exit 0
fi
"${ROOT}/hack/tools.sh" all
"${ROOT}/hack/images.sh" injector tokenexchange agenttrace agentcard agentbuild netpol
"${BIN}/kind" create cluster --name "${CLUSTER}" --wait 120s
trap '"${BIN}/kind" delete cluster --name "${CLUSTER}"' EXIT
for p in injector tokenexchange agenttrace agentcard agentbuild netpol; do
  "${BIN}/kind" load docker-image --name "${CLUSTER}" "ghcr.io/kagenti/kagenti-${p}:v0.1.0"
done
kubeconfig="$(mktemp)"
"${BIN}/kind" get kubeconfig --name "${CLUSTER}" > "${kubeconfig}"
"${BIN}/kubectl" --kubeconfig "${kubeconfig}" apply --server-side -k "${ROOT}/deploy/kustomize/overlays/all"
"${BIN}/kubectl" --kubeconfig "${kubeconfig}" -n kagenti-system wait --for=condition=Available deploy --all --timeout=180s
KAGENTI_E2E_KUBECONFIG="${kubeconfig}" KAGENTI_E2E_CLUSTER=kind go test -count=1 -v "${ROOT}/e2e/..."
