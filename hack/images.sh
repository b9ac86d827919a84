#!/usr/bin/env bash
# Builds one image per binary. Arguments are pillar names, "authbridge" for the tokenexchange data
# plane (kagenti-authbridge), "agentcard-federation-member" for the AgentCard federation's member
# agent alone (kagenti-agentcard-federation-member), and the programs the kind suite runs in pods
# beside them: "dev-idp" (the development OpenID provider of hack/idp), "e2e-agent" (the stand-in agent of
# the e2e suite, e2e/cmd/kagenti-e2e-agent), "agent-telemetry" (the example agent that reads an
# AgentTrace's files, examples/agent-telemetry) and "otlp-sink" (an OTLP/HTTP receiver that lists
# what it received, hack/otlp-sink).
#
# Three more are upstream programs that hack/tools.sh builds into bin/: "spire-server", "spire-agent"
# and "spiffe-helper" (the kind suite's SPIRE and the injected spiffe-helper). They are linked
# against this machine's glibc (SPIRE's server needs cgo for SQLite; the others are built the same
# way), so they go on kagenti.local/glibc-base: the static base plus the C library and loader the
# binaries name (ldd), copied from this machine, as distroless "base" adds glibc to "static". They are
# tagged kagenti.local/<name>:<version of hack/tools.sh>, run as 65532:65532 unless their manifest
# says otherwise, and need no shell.
#
# Two ways, the same image (a static binary at /manager, run as 65532:65532, nothing else to run):
#   IMAGES_BUILD=local (default)  the binaries are built once on this machine (CGO_ENABLED=0) and put
#                                 on kagenti.local/static-base, a base made here from this machine's
#                                 Debian files with the contents of distroless static (CA
#                                 certificates, passwd and group with root, nobody and nonroot,
#                                 nsswitch.conf, time zones, /tmp, /home/nonroot); needs no registry.
#   IMAGES_BUILD=dockerfile       the published multi-stage Dockerfile (golang and distroless images
#                                 from their registries).
# The engine is the one DOCKER_HOST names, else the one `make kind-up` started (.local/kind/docker.sock),
# else the default; without any, this says so and exits 0.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REGISTRY="${REGISTRY:-ghcr.io/kagenti}"
TAG="${TAG:-v0.1.0}"
IMAGES_BUILD="${IMAGES_BUILD:-local}"
WORK="${ROOT}/.local/images"
# Binaries that live in another pillar's module, and those outside the pillars: the directory the
# build runs in (GOWORK=off where it is a module of its own) and the package built there.
declare -A MODULE_OF=([authbridge]=tokenexchange [agentcard-federation-member]=agentcard)
declare -A DIR_OF=([dev-idp]=hack/idp [e2e-agent]=e2e [agent-telemetry]=examples/agent-telemetry [otlp-sink]=hack/otlp-sink)
declare -A PKG_OF=([dev-idp]=. [e2e-agent]=./cmd/kagenti-e2e-agent [agent-telemetry]=. [otlp-sink]=.)
# The upstream programs of bin/ and the versions hack/tools.sh builds.
tools_version() { sed -n "s/^$1=//p" "${ROOT}/hack/tools.sh"; }
declare -A UPSTREAM_VERSION=([spire-server]="$(tools_version SPIRE_VERSION)" [spire-agent]="$(tools_version SPIRE_VERSION)"
  [spiffe-helper]="$(tools_version SPIFFE_HELPER_VERSION)")
dir_of() { printf '%s' "${DIR_OF[$1]:-${MODULE_OF[$1]:-$1}}"; }
pkg_of() { printf '%s' "${PKG_OF[$1]:-./cmd/kagenti-$1}"; }
log() { printf '[images] %s\n' "$*" >&2; }

if [[ -z "${DOCKER_HOST:-}" && -S "${ROOT}/.local/kind/docker.sock" ]]; then
  export DOCKER_HOST="unix://${ROOT}/.local/kind/docker.sock"
fi
if ! docker info >/dev/null 2>&1; then
  echo "images: skipped — no Docker engine reachable (docker info failed; 'make kind-up' starts one)"
  exit 0
fi
# --static-base: only make the static base, and print its reference (hack/kind/tekton.sh builds on it).
static_base_only=0
if [[ "${1:-}" == --static-base ]]; then
  static_base_only=1
  shift
fi
for p in "$@"; do
  if [[ -n "${UPSTREAM_VERSION[$p]:-}" ]]; then
    [[ -x "${ROOT}/bin/$p" ]] || { log "bin/$p is missing: make tools"; exit 2; }
    continue
  fi
  [[ -d "${ROOT}/$(dir_of "$p")/$(pkg_of "$p")" ]] || { log "unknown binary kagenti-${p} (no $(dir_of "$p")/$(pkg_of "$p"))"; exit 2; }
done

if [[ "${IMAGES_BUILD}" == dockerfile ]]; then
  for p in "$@"; do
    [[ -z "${DIR_OF[$p]:-}" && -z "${UPSTREAM_VERSION[$p]:-}" ]] || { log "kagenti-${p} is a test program: IMAGES_BUILD=local only"; exit 2; }
    docker build -f "${ROOT}/Dockerfile" --build-arg "PILLAR=${MODULE_OF[$p]:-$p}" --build-arg "BINARY=kagenti-${p}" \
      --build-arg "VERSION=${TAG}" -t "${REGISTRY}/kagenti-${p}:${TAG}" "${ROOT}"
  done
  exit 0
fi
[[ "${IMAGES_BUILD}" == local ]] || { log "IMAGES_BUILD is ${IMAGES_BUILD}; it is local or dockerfile"; exit 2; }

# static_base: kagenti.local/static-base:<key>, made once from files of this machine's Debian packages
# (ca-certificates, tzdata); prints its reference.
static_base() {
  local certs=/etc/ssl/certs/ca-certificates.crt zones=/usr/share/zoneinfo
  [[ -f "${certs}" && -d "${zones}" ]] || { log "need ${certs} and ${zones}: apt-get install ca-certificates tzdata"; exit 1; }
  local k; k="$( (sha256sum "${certs}"; find "${zones}" -type f -printf '%P %s\n' | sort; sha256sum "${BASH_SOURCE[0]}") | sha256sum | cut -c1-16)"
  local ref="kagenti.local/static-base:${k}"
  if ! docker image inspect "${ref}" >/dev/null 2>&1; then
    log "making ${ref} (distroless static's contents, from Debian's ca-certificates and tzdata)"
    local dir; dir="$(mktemp -d)"
    mkdir -p "${dir}/etc/ssl/certs" "${dir}/usr/share" "${dir}/tmp" "${dir}/home/nonroot" "${dir}/root"
    cp "${certs}" "${dir}/etc/ssl/certs/ca-certificates.crt"
    cp -r "${zones}" "${dir}/usr/share/zoneinfo"
    printf '%s\n' 'root:x:0:0:root:/root:/sbin/nologin' 'nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin' \
      'nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin' > "${dir}/etc/passwd"
    printf '%s\n' 'root:x:0:' 'tty:x:5:' 'staff:x:50:' 'nobody:x:65534:' 'nonroot:x:65532:' > "${dir}/etc/group"
    printf 'hosts: files dns\n' > "${dir}/etc/nsswitch.conf"
    chmod 1777 "${dir}/tmp"
    chmod 0700 "${dir}/root" "${dir}/home/nonroot"
    tar -C "${dir}" --numeric-owner --owner=0 --group=0 --exclude=./home/nonroot -c . > "${dir}.tar"
    tar -C "${dir}" --numeric-owner --owner=65532 --group=65532 -rf "${dir}.tar" ./home/nonroot
    docker import - "${ref}" < "${dir}.tar" >/dev/null
    rm -rf "${dir}" "${dir}.tar"
  fi
  printf '%s' "${ref}"
}

# glibc_base <binary>...: kagenti.local/glibc-base:<key>, the static base plus the shared objects the
# binaries load (ldd: the C library and the loader, for Go programs built with cgo), copied from
# this machine at the paths ldd names; prints its reference.
glibc_base() {
  local libs; libs="$(ldd "$@" | awk '/=> \// {print $3} /^[[:space:]]+\// {print $1}' | sort -u)"
  [[ -n "${libs}" ]] || { log "ldd names no shared object for $*"; exit 1; }
  local k; k="$( (echo "${base}"; for l in ${libs}; do echo "${l}"; sha256sum < "${l}"; done) | sha256sum | cut -c1-16)"
  local ref="kagenti.local/glibc-base:${k}"
  if ! docker image inspect "${ref}" >/dev/null 2>&1; then
    log "making ${ref} (the static base and this machine's $(echo ${libs} | xargs -n1 basename | tr '\n' ' '))"
    local ctx; ctx="$(mktemp -d)"
    for l in ${libs}; do mkdir -p "${ctx}/root$(dirname "${l}")"; cp -L "${l}" "${ctx}/root${l}"; done
    printf 'FROM %s\nCOPY root/ /\n' "${base}" > "${ctx}/Dockerfile"
    DOCKER_BUILDKIT=0 docker build -q -t "${ref}" "${ctx}" > "${ctx}.log" 2>&1 || { cat "${ctx}.log" >&2; exit 1; }
    rm -rf "${ctx}" "${ctx}.log"
  fi
  printf '%s' "${ref}"
}

# upstream_image <name>: kagenti.local/<name>:<version>, bin/<name> at /<name> on the glibc base.
upstream_image() {
  local p=$1 ctx="${WORK}/$1"
  local ref="kagenti.local/${p}:${UPSTREAM_VERSION[$p]}"
  mkdir -p "${ctx}"
  cp "${ROOT}/bin/${p}" "${ctx}/${p}"
  printf 'FROM %s\nCOPY %s /%s\nUSER 65532:65532\nENTRYPOINT ["/%s"]\n' "$(glibc_base "${ROOT}/bin/${p}")" "${p}" "${p}" "${p}" > "${ctx}/Dockerfile"
  DOCKER_BUILDKIT=0 docker build -q -t "${ref}" "${ctx}" > "${ctx}/build.log" 2>&1 ||
    { cat "${ctx}/build.log" >&2; exit 1; }
  rm -f "${ctx}/${p}"
  log "built ${ref} (bin/${p})"
}

base="$(static_base)"
if ((static_base_only)); then
  printf '%s\n' "${base}"
  exit 0
fi
mkdir -p "${WORK}"
for p in "$@"; do
  if [[ -n "${UPSTREAM_VERSION[$p]:-}" ]]; then
    upstream_image "$p"
    continue
  fi
  ctx="${WORK}/kagenti-${p}"
  mkdir -p "${ctx}"
  log "building kagenti-${p} (CGO_ENABLED=0, version ${TAG})"
  dir="$(dir_of "$p")" gowork=""
  [[ -f "${ROOT}/${dir}/go.mod" && ( "${dir}" == hack/* || "${dir}" == examples/* ) ]] && gowork=off
  (cd "${ROOT}/${dir}" && GOWORK=${gowork} CGO_ENABLED=0 go build -tags "$(cat "${ROOT}/hack/go-build-tags")" -trimpath -ldflags "-s -w -X main.version=${TAG}" -o "${ctx}/manager" "$(pkg_of "$p")")
  printf 'FROM %s\nCOPY manager /manager\nUSER 65532:65532\nENTRYPOINT ["/manager"]\n' "${base}" > "${ctx}/Dockerfile"
  # Debian's dockerd 20.10 has no BuildKit; newer clients print a notice about the legacy builder.
  DOCKER_BUILDKIT=0 docker build -q -t "${REGISTRY}/kagenti-${p}:${TAG}" "${ctx}" > "${ctx}/build.log" 2>&1 ||
    { cat "${ctx}/build.log" >&2; exit 1; }
  log "built ${REGISTRY}/kagenti-${p}:${TAG}"
done
