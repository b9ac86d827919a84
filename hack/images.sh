#!/usr/bin/env bash
# Builds one image per binary from the root Dockerfile. Needs a Docker engine; says so and exits 0 without one.
# Arguments are pillar names, plus "authbridge" for the tokenexchange data plane (kagenti-authbridge).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REGISTRY="${REGISTRY:-ghcr.io/kagenti}"
TAG="${TAG:-v0.1.0}"
# Binaries that live in another pillar's module.
declare -A MODULE_OF=([authbridge]=tokenexchange)
if ! docker info >/dev/null 2>&1; then
  echo "images: skipped — no Docker engine reachable (docker info failed)"
  exit 0
fi
for p in "$@"; do
  docker build -f "${ROOT}/Dockerfile" --build-arg "PILLAR=${MODULE_OF[$p]:-$p}" --build-arg "BINARY=kagenti-${p}" \
    --build-arg "VERSION=${TAG}" -t "${REGISTRY}/kagenti-${p}:${TAG}" "${ROOT}"
done
