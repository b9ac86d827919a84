#!/usr/bin/env bash
# Renders every kustomize overlay and the helm chart, failing on any error or empty output.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${ROOT}/bin"
OUT="${ROOT}/.local/render"
mkdir -p "${OUT}"

for overlay in "${ROOT}"/deploy/kustomize/overlays/*/; do
  name="$(basename "${overlay}")"
  "${BIN}/kubectl" kustomize "${overlay}" > "${OUT}/kustomize-${name}.yaml"
  n="$(grep -c '^kind:' "${OUT}/kustomize-${name}.yaml" || true)"
  [[ "${n}" -gt 0 ]] || { echo "overlay ${name} rendered no objects" >&2; exit 1; }
  echo "kustomize overlays/${name}: ${n} objects"
done

chart="${ROOT}/deploy/helm/kagenti"
"${BIN}/helm" lint "${chart}" --quiet
"${BIN}/helm" template kagenti "${chart}" --namespace kagenti-system > "${OUT}/helm-default.yaml"
echo "helm default values: $(grep -c '^kind:' "${OUT}/helm-default.yaml") objects"
# Every pillar on, and each pillar alone, must render too.
sets=""
for c in "${chart}"/charts/*/; do sets+="--set $(basename "$c").enabled=true "; done
# shellcheck disable=SC2086
"${BIN}/helm" template kagenti "${chart}" --namespace kagenti-system ${sets} > "${OUT}/helm-all.yaml"
echo "helm all pillars: $(grep -c '^kind:' "${OUT}/helm-all.yaml") objects"
for c in "${chart}"/charts/*/; do
  p="$(basename "$c")"
  off=""
  for o in "${chart}"/charts/*/; do off+="--set $(basename "$o").enabled=false "; done
  # shellcheck disable=SC2086
  "${BIN}/helm" template kagenti "${chart}" --namespace kagenti-system ${off} --set "${p}.enabled=true" --include-crds > "${OUT}/helm-${p}.yaml"
  echo "helm ${p} only: $(grep -c '^kind:' "${OUT}/helm-${p}.yaml") objects"
done
