#!/usr/bin/env bash
# Builds every binary the tests and the local cluster need into bin/, from the Go module proxy only.
# Each tool is rebuilt only when its recorded version (bin/.stamps/<tool>) differs from the wanted one.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${ROOT}/bin"
STAMPS="${BIN}/.stamps"
mkdir -p "${STAMPS}"

KUBE_VERSION=v1.37.2
KUBE_MINOR=37
KWOK_VERSION=v0.8.0
CONTROLLER_GEN_VERSION=v0.23.0
HELM_VERSION=v3.22.0
KIND_VERSION=v0.33.0
# Identity test bed (docs/identity.md): SPIRE (hack/spire) and spiffe-helper (hack/spiffe-helper),
# whose go.mod files pin these versions, and the development OpenID provider of hack/idp.
SPIRE_VERSION=v1.13.3
SPIFFE_HELPER_VERSION=v0.11.0

log() { printf '[tools] %s\n' "$*" >&2; }

# wanted <tool> <version-key>: true when bin/<tool> is missing or was built from another version.
wanted() {
  local tool=$1 key=$2
  [[ -x "${BIN}/${tool}" ]] || return 0
  [[ "$(cat "${STAMPS}/${tool}" 2>/dev/null)" == "${key}" ]] && return 1
  return 0
}
stamp() { echo "$2" > "${STAMPS}/$1"; }

# The version key of a wrapper module is the hash of its go.mod and go.sum, so a bump rebuilds.
module_key() { cat "$1/go.mod" "$1/go.sum" | sha256sum | cut -c1-16; }

# requires <wrapper module dir> <module> <version>: fails, saying so, unless the wrapper module's
# go.mod requires exactly that version (the constants above and go.mod must not drift apart).
requires() {
  local dir=$1 module=$2 version=$3
  grep -qE "^\s*(require )?${module//./\\.} ${version//./\\.}( |$)" "${dir}/go.mod" ||
    { log "${dir#"${ROOT}/"}/go.mod does not require ${module} ${version}"; return 1; }
}

build_kube() {
  local key; key="$(module_key "${ROOT}/hack/kube")"
  local need=()
  for t in kube-apiserver kube-controller-manager kube-scheduler kubectl; do
    wanted "$t" "$key" && need+=("./cmd/$t")
  done
  [[ ${#need[@]} -eq 0 ]] && return 0
  log "building ${need[*]} (Kubernetes ${KUBE_VERSION}; ~8 min on a cold cache)"
  local ld=""
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X ${pkg}.gitVersion=${KUBE_VERSION} -X ${pkg}.gitMajor=1 -X ${pkg}.gitMinor=${KUBE_MINOR}"
    ld+=" -X ${pkg}.gitTreeState=clean -X ${pkg}.buildDate=1970-01-01T00:00:00Z"
  done
  (cd "${ROOT}/hack/kube" && GOWORK=off go build -trimpath -ldflags "-s -w ${ld}" -o "${BIN}/" "${need[@]}")
  for t in "${need[@]}"; do stamp "$(basename "$t")" "$key"; done
}

build_etcd() {
  local key; key="$(module_key "${ROOT}/hack/etcd")"
  wanted etcd "$key" || return 0
  log "building etcd"
  (cd "${ROOT}/hack/etcd" && GOWORK=off go build -trimpath -ldflags "-s -w" -o "${BIN}/etcd" ./cmd/etcd)
  stamp etcd "$key"
}

# SPIRE's go.mod carries replaces, so `go install …@version` is refused: hack/spire requires it as a
# tool dependency and builds it. The version is stamped the way SPIRE's release builds do: without
# the tag's "v", since the server parses it as a semantic version at start (its datastore
# migrations compare versions) and panics on "v1.13.3".
build_spire() {
  local version="${SPIRE_VERSION#v}"
  local key; key="${version}-$(module_key "${ROOT}/hack/spire")"
  requires "${ROOT}/hack/spire" github.com/spiffe/spire "${SPIRE_VERSION}"
  local need=()
  for t in spire-server spire-agent; do
    wanted "$t" "$key" && need+=("github.com/spiffe/spire/cmd/$t")
  done
  [[ ${#need[@]} -eq 0 ]] && return 0
  log "building ${need[*]} (SPIRE ${SPIRE_VERSION}; ~5 min on a cold cache)"
  (cd "${ROOT}/hack/spire" && GOWORK=off go build -trimpath \
    -ldflags "-s -w -X github.com/spiffe/spire/pkg/common/version.gittag=${version}" -o "${BIN}/" "${need[@]}")
  for t in "${need[@]}"; do stamp "$(basename "$t")" "$key"; done
}

# spiffe-helper's own module is fine, but `go install …@version` asks the proxy for the module's
# version list (deprecation check), which the proxy refuses here: hack/spiffe-helper requires it as
# a tool dependency instead.
build_spiffe_helper() {
  local key; key="${SPIFFE_HELPER_VERSION}-$(module_key "${ROOT}/hack/spiffe-helper")"
  requires "${ROOT}/hack/spiffe-helper" github.com/spiffe/spiffe-helper "${SPIFFE_HELPER_VERSION}"
  wanted spiffe-helper "$key" || return 0
  log "building spiffe-helper ${SPIFFE_HELPER_VERSION}"
  (cd "${ROOT}/hack/spiffe-helper" && GOWORK=off go build -trimpath \
    -ldflags "-s -w -X github.com/spiffe/spiffe-helper/pkg/version.gittag=${SPIFFE_HELPER_VERSION}" \
    -o "${BIN}/spiffe-helper" github.com/spiffe/spiffe-helper/cmd/spiffe-helper)
  stamp spiffe-helper "$key"
}

# The development OpenID provider is our own code: its key covers the sources too.
build_idp() {
  local key; key="$(cat "${ROOT}/hack/idp/go.mod" "${ROOT}/hack/idp/go.sum" "${ROOT}"/hack/idp/*.go | sha256sum | cut -c1-16)"
  wanted kagenti-dev-idp "$key" || return 0
  log "building kagenti-dev-idp (hack/idp)"
  (cd "${ROOT}/hack/idp" && GOWORK=off go build -trimpath -ldflags "-s -w" -o "${BIN}/kagenti-dev-idp" .)
  stamp kagenti-dev-idp "$key"
}

build_opa_extauthz() {
  local key; key="$(cat "${ROOT}/hack/opa-extauthz/go.mod" "${ROOT}/hack/opa-extauthz/go.sum" "${ROOT}"/hack/opa-extauthz/*.go | sha256sum | cut -c1-16)"
  wanted kagenti-opa-extauthz "$key" || return 0
  log "building kagenti-opa-extauthz (hack/opa-extauthz)"
  (cd "${ROOT}/hack/opa-extauthz" && GOWORK=off go build -trimpath -ldflags "-s -w" -o "${BIN}/kagenti-opa-extauthz" .)
  stamp kagenti-opa-extauthz "$key"
}

identity() {
  build_spire
  build_spiffe_helper
  build_idp
  build_opa_extauthz
}

# go_install <binary> <package> <version>
go_install() {
  local tool=$1 pkg=$2 version=$3
  wanted "$tool" "$version" || return 0
  log "installing ${pkg}@${version}"
  GOBIN="${BIN}" go install -trimpath -ldflags "-s -w" "${pkg}@${version}"
  stamp "$tool" "$version"
}

# kwok, kwokctl, controller-gen and helm are tools of hack/kube's module rather than `go install`s
# of their own: built from the same versions of the Kubernetes client libraries (and of what those
# import) as the Kubernetes binaries, they reuse their compiled packages from Go's build cache
# instead of compiling three more copies of them at other versions (docs/benchmarks.md, the cold
# budget). Each keeps its release's version: hack/kube/go.mod requires exactly those below.
# kube_tool <binary> <package> <version> [ldflags]
kube_tool() {
  local tool=$1 pkg=$2 version=$3 ld=${4:-}
  local module="${pkg%%/cmd/*}"
  requires "${ROOT}/hack/kube" "${module}" "${version}"
  local key; key="${version}-$(module_key "${ROOT}/hack/kube")"
  wanted "$tool" "$key" || return 0
  log "building ${tool} ${version} (hack/kube)"
  (cd "${ROOT}/hack/kube" && GOWORK=off go build -trimpath -ldflags "-s -w ${ld}" -o "${BIN}/${tool}" "${pkg}")
  stamp "$tool" "$key"
}

build_kwok() {
  kube_tool kwok sigs.k8s.io/kwok/cmd/kwok "${KWOK_VERSION}"
  kube_tool kwokctl sigs.k8s.io/kwok/cmd/kwokctl "${KWOK_VERSION}"
}
# controller-gen writes its version into every CRD it generates (controller-gen.kubebuilder.io/version),
# from the main module's version when nothing sets it: set, as `go install …@version` would have it.
build_controller_gen() {
  kube_tool controller-gen sigs.k8s.io/controller-tools/cmd/controller-gen "${CONTROLLER_GEN_VERSION}" \
    "-X sigs.k8s.io/controller-tools/pkg/version.version=${CONTROLLER_GEN_VERSION}"
}

# Two lanes side by side: hack/kube's programs one after the other (each reuses what the one before
# compiled), and everything else, which shares no compiled package with them. One `go build` leaves
# CPUs idle while it links and while the last packages of a long import chain compile one by one;
# the other lane fills them.
# (Each lane runs with errexit in force, never under `||`, which would turn it off and stamp a
# failed build.)
all() {
  (
    build_etcd
    go_install kind sigs.k8s.io/kind "${KIND_VERSION}"
    identity
  ) &
  OTHER_LANE=$!
  trap 'pkill -TERM -P "${OTHER_LANE}" 2>/dev/null; kill "${OTHER_LANE}" 2>/dev/null || true' EXIT
  build_kube
  build_kwok
  build_controller_gen
  kube_tool helm helm.sh/helm/v3/cmd/helm "${HELM_VERSION}"
  wait "${OTHER_LANE}"
  trap - EXIT
}

case "${1:-all}" in
  all) all ;;
  envtest) build_etcd; build_kube ;;
  local) build_etcd; build_kube; build_kwok ;;
  identity) identity ;;
  controller-gen) build_controller_gen ;;
  *) echo "usage: $0 [all|envtest|local|identity|controller-gen]" >&2; exit 2 ;;
esac
