#!/usr/bin/env bash
# Keeps the wrapper modules that build upstream programs on the same versions of what they share, so
# that Go's build cache compiles those packages once instead of once per module (docs/benchmarks.md,
# the cold budget of `make test`). Two groups, one per build configuration (Go caches a package per
# set of flags, and CGO_ENABLED is one of them):
#
#   kube    (cgo on)   hack/kube (the Kubernetes binaries, kwok, controller-gen, helm) and
#                      hack/kind/kube (kubelet, kubeadm, kube-proxy of the node image): hack/kind/kube
#                      follows hack/kube, whose versions are the Kubernetes release's.
#   static  (cgo off)  the kind suite's images built from upstream (hack/kind/coredns, kube-router,
#                      local-path, tekton) and our own images (the workspace, hack/images.sh): every
#                      module of client-go's closure at the same version in all of them.
#
#   hack/align.sh           align (go mod edit + tidy in hack/kind/*; the workspace is only read)
#   hack/align.sh --check   say what differs and fail (make lint)
#   hack/align.sh --compile compile the static group's shared packages once, before the builds that
#                           share them start side by side (hack/kind.sh): Go's cache has no lock for
#                           work in progress, so each would compile them at the same time otherwise
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
STATIC=(hack/kind/coredns hack/kind/kube-router hack/kind/local-path hack/kind/tekton)
CLIENT=(k8s.io/client-go/kubernetes k8s.io/client-go/informers k8s.io/client-go/tools/cache
  k8s.io/client-go/tools/clientcmd k8s.io/client-go/rest)
NODE=(k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kubeadm k8s.io/kubernetes/cmd/kube-proxy)

# closure <module dir> <package>...: "path version" of every module the packages' closure comes
# from. The workspace (".") is read with its go.work; the others alone.
closure() {
  local dir=$1 gowork=off
  shift
  [[ "${dir}" == . ]] && gowork=
  (cd "${ROOT}/${dir}" && GOWORK=${gowork} go list -deps -f '{{with .Module}}{{.Path}} {{.Version}}{{end}}' "$@") |
    grep -v '^$' | grep -v '^github.com/kagenti/' | sort -u
}
# versions <module dir>: "path version" of the module's whole build list.
versions() { (cd "${ROOT}/$1" && GOWORK=off go list -m -f '{{.Path}} {{.Version}}' all) | sort; }

# newest: reads "path version" lines and prints, per path, the highest by semantic versioning (a
# pre-release sorts below its release: sort -V, with "~" in place of the pre-release's "-").
newest() {
  awk '{ v = $2; i = index(v, "-"); if (i > 0) v = substr(v, 1, i - 1) "~" substr(v, i + 1); print $1, v, $2 }' |
    sort -k1,1 -k2,2V | awk '{ last[$1] = $3 } END { for (p in last) print p, last[p] }' | sort
}

# kube_drift: the modules of the node programs' closure whose version differs from hack/kube's
# ("path node-version kube-version"); the k8s.io staging modules are replaced in both, so left out.
kube_drift() {
  join <(closure hack/kind/kube "${NODE[@]}") <(versions hack/kube) | awk '$2 != $3 && $1 !~ /^k8s\.io\//'
}

check() {
  local rc=0 drift first m c
  drift="$(kube_drift)"
  if [[ -n "${drift}" ]]; then
    echo "hack/kind/kube differs from hack/kube (module, hack/kind/kube, hack/kube): run hack/align.sh" >&2
    echo "${drift}" >&2
    rc=1
  fi
  first="$(closure . "${CLIENT[@]}")"
  for m in "${STATIC[@]}"; do
    c="$(closure "$m" "${CLIENT[@]}")"
    if [[ "${c}" != "${first}" ]]; then
      echo "${m}: client-go's closure differs from the workspace's (< workspace, > ${m}): run hack/align.sh, or raise the workspace's" >&2
      diff <(echo "${first}") <(echo "${c}") >&2 || true
      rc=1
    fi
  done
  return "${rc}"
}

if [[ "${1:-}" == --check ]]; then check; exit; fi
if [[ "${1:-}" == --compile ]]; then
  # As hack/kind/build.sh and hack/images.sh build (CGO_ENABLED=0, -trimpath); the results stay in
  # Go's cache only. Any module of the group resolves the same versions; its first one is used.
  cd "${ROOT}/${STATIC[0]}" && CGO_ENABLED=0 GOWORK=off exec go build -trimpath "${CLIENT[@]}" \
    k8s.io/client-go/tools/leaderelection k8s.io/client-go/tools/record k8s.io/client-go/util/workqueue \
    k8s.io/client-go/dynamic k8s.io/client-go/discovery
fi

# kube: hack/kind/kube takes hack/kube's version of everything it shares with it.
args=()
while read -r p _ v; do args+=("-require=${p}@${v}"); done < <(kube_drift)
((${#args[@]} == 0)) || (cd "${ROOT}/hack/kind/kube" && go mod edit "${args[@]}" && GOWORK=off go mod tidy)

# static: each module requires the newest version any of them (or the workspace) resolves; tidy
# settles the rest, and the rounds repeat until nothing moves.
for round in 1 2 3 4 5; do
  all="$(for m in . "${STATIC[@]}"; do closure "$m" "${CLIENT[@]}"; done | newest)"
  for m in "${STATIC[@]}"; do
    mine="$(closure "$m" "${CLIENT[@]}" | awk '{print $1}')"
    args=()
    while read -r p v; do
      grep -qxF "$p" <<<"${mine}" && args+=("-require=${p}@${v}")
    done <<<"${all}"
    (cd "${ROOT}/${m}" && go mod edit "${args[@]}" && GOWORK=off go mod tidy)
  done
  if check 2>/dev/null; then echo "aligned (${round} round(s))"; exit 0; fi
done
check
