#!/usr/bin/env bash
# Builds one image per binary from the root Dockerfile. Needs a Docker engine; says so and exits 0 without one.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REGISTRY="${REGISTRY:-ghcr.io/kagenti}"
TAG="${TAG:-v0.1.0}"
if ! docker info >/dev/null 2>&1; then
  echo "images: skipped — no Docker engine reachable (docker info failed)"
  exit 0
fi
for p in "$@"; do
  docker build -f "${ROOT}/Dockerfile" --build-arg "PILLAR=${p}" -t "${REGISTRY}/kagenti-${p}:${TAG}" "${ROOT}"
done
