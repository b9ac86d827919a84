# Builds what the kind cluster runs, from pinned sources only (sourced by hack/kind-up.sh after lib.sh):
#   Go binaries (kubelet, kubeadm, kube-proxy, pause, CoreDNS, kube-router) from the Go module proxy
#   through the modules under hack/kind/, into the kind build cache's bin/ (lib.sh: CACHE; each stamped with its inputs' key);
#   two Debian root filesystems made by debootstrap (the node, and a small base for the component
#   images); the component images, tagged with the names kubeadm asks for; and the node image, with
#   those images already in its containerd, named kagenti.local/kind-node:<Kubernetes>-<key>.
# Every step is skipped when its key is unchanged, so a second kind-up rebuilds nothing.

CACHE_BIN="${CACHE}/bin"
KIND_MODULE_DIR=""

# go_build <module dir> <key> <CGO_ENABLED> <ldflags> <package>...: builds the packages into
# the build cache's bin/ unless each is already there with the same key.
go_build() {
  local dir=$1 k=$2 cgo=$3 ld=$4
  shift 4
  local need=() p
  mkdir -p "${CACHE_BIN}/.stamps"
  for p in "$@"; do
    [[ -x "${CACHE_BIN}/${p##*/}" && "$(cat "${CACHE_BIN}/.stamps/${p##*/}" 2>/dev/null)" == "${k}" ]] || need+=("${p}")
  done
  [[ ${#need[@]} -eq 0 ]] && return 0
  log "building ${need[*]##*/} (${dir#"${ROOT}/"})"
  (cd "${dir}" && CGO_ENABLED=${cgo} GOWORK=off go build -trimpath -ldflags "-s -w ${ld}" -o "${CACHE_BIN}/" "${need[@]}")
  for p in "${need[@]}"; do echo "${k}" > "${CACHE_BIN}/.stamps/${p##*/}"; done
}

build_binaries() {
  local ld="" pkg minor
  minor="${KUBE_VERSION#v1.}" minor="${minor%%.*}"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X ${pkg}.gitVersion=${KUBE_VERSION} -X ${pkg}.gitMajor=1 -X ${pkg}.gitMinor=${minor}"
    ld+=" -X ${pkg}.gitTreeState=clean -X ${pkg}.buildDate=1970-01-01T00:00:00Z"
  done
  go_build "${KIND_DIR}/kube" "$(key "${KIND_DIR}/kube/go.mod" "${KIND_DIR}/kube/go.sum" "${ld}")" 1 "${ld}" \
    k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kubeadm k8s.io/kubernetes/cmd/kube-proxy
  go_build "${KIND_DIR}/kube" "$(key "${KIND_DIR}/kube/cmd/pause/main.go")" 0 "" ./cmd/pause
  go_build "${KIND_DIR}/coredns" "$(key "${KIND_DIR}/coredns/go.mod" "${KIND_DIR}/coredns/go.sum")" 0 "" github.com/coredns/coredns
  go_build "${KIND_DIR}/kube-router" "$(key "${KIND_DIR}/kube-router/go.mod" "${KIND_DIR}/kube-router/go.sum")" 0 "" \
    github.com/cloudnativelabs/kube-router/v2/cmd/kube-router
  go_build "${KIND_DIR}/local-path" "$(key "${KIND_DIR}/local-path/go.mod" "${KIND_DIR}/local-path/go.sum")" 0 "" \
    github.com/rancher/local-path-provisioner
}

# need_tools: the control plane and kubectl come from bin/ (hack/tools.sh, cached by version); kind
# from bin/ too, or from PATH when that one is the same version.
need_tools() {
  local t
  for t in kube-apiserver kube-controller-manager kube-scheduler etcd kubectl; do
    [[ -x "${BIN}/${t}" ]] || { log "bin/${t} is missing: hack/tools.sh envtest"; "${ROOT}/hack/tools.sh" envtest; break; }
  done
  command -v kind >/dev/null || { log "kind is missing: hack/tools.sh all"; "${ROOT}/hack/tools.sh" all; }
  local v; v="$(kind version 2>/dev/null | awk '{print $2}')"
  [[ "${v}" == "${KIND_VERSION}" ]] || die "kind on PATH ($(command -v kind)) is ${v:-unknown}, not ${KIND_VERSION}; make tools builds that one into bin/"
}

# rootfs <name> <package>...: a Debian root filesystem made by debootstrap, cached by its package
# list; prints its directory.
rootfs() {
  local name=$1
  shift
  local k; k="$(key "${DEBIAN_SUITE}" "${DEBIAN_MIRROR}" "$@")"
  local dir="${CACHE}/rootfs-${name}-${k}"
  # One debootstrap per name at a time: hack/kind.sh builds the Tekton images (on the base) beside
  # kind-up's node image (on the same base).
  local lock
  exec {lock}>"${CACHE}/.rootfs-${name}.lock"
  flock "${lock}"
  if [[ ! -f "${dir}/.complete" ]]; then
    log "debootstrap ${DEBIAN_SUITE} for the ${name} image: $*"
    rm -rf "${dir}" "${dir}.tmp"
    local packages; packages="$(IFS=,; echo "$*")"
    debootstrap --variant=minbase --include="${packages}" "${DEBIAN_SUITE}" "${dir}.tmp" "${DEBIAN_MIRROR}" \
      > "${CACHE}/debootstrap-${name}.log" 2>&1 ||
      { tail -n 20 "${CACHE}/debootstrap-${name}.log" >&2; rm -rf "${dir}.tmp"; die "debootstrap failed (log: ${CACHE}/debootstrap-${name}.log)"; }
    rm -rf "${dir}.tmp/var/cache/apt/archives/"*.deb "${dir}.tmp/var/lib/apt/lists/"*
    touch "${dir}.tmp/.complete"
    mv "${dir}.tmp" "${dir}"
    local old
    for old in "${CACHE}/rootfs-${name}-"*; do [[ "${old}" == "${dir}" ]] || rm -rf "${old}"; done
  fi
  exec {lock}>&-
  printf '%s' "${dir}"
}

# image_exists <ref>
image_exists() { docker image inspect "$1" >/dev/null 2>&1; }

# import_rootfs <dir> <ref> [docker import --change …]: a one-layer image of a directory.
import_rootfs() {
  local dir=$1 ref=$2
  shift 2
  tar -C "${dir}" --exclude=./.complete -c . | docker import "$@" - "${ref}" >/dev/null
}

# component_image <ref> <base> <dockerfile body> <file>...: docker build in a fresh context holding
# the files.
component_image() {
  local ref=$1 base=$2 body=$3
  shift 3
  local ctx; ctx="$(mktemp -d "${WORK}/ctx.XXXXXX")"
  [[ $# -eq 0 ]] || cp "$@" "${ctx}/"
  printf 'FROM %s\n%s\n' "${base}" "${body}" > "${ctx}/Dockerfile"
  docker build -q -t "${ref}" "${ctx}" > "${ctx}.log" 2>&1 || { cat "${ctx}.log" >&2; rm -rf "${ctx}" "${ctx}.log"; die "docker build of ${ref} failed"; }
  rm -f "${ctx}.log"
  rm -rf "${ctx}"
}

# kind_base_image: kagenti.local/kind-base, the Debian base of the component images (a shell and
# coreutils: also the local-path helper and the suite's shell image), made once; prints its reference.
kind_base_image() {
  local dir; dir="$(rootfs base "${BASE_PACKAGES[@]}")"
  local ref; ref="kagenti.local/kind-base:$(basename "${dir}" | sed 's/^rootfs-base-//')"
  image_exists "${ref}" || import_rootfs "${dir}" "${ref}"
  printf '%s' "${ref}"
}

# The images kubeadm ${KUBE_VERSION} pulls, plus containerd's sandbox image and kube-router, all
# built here; prints their references.
build_component_images() {
  local base_ref; base_ref="$(kind_base_image)"
  local refs=() ref name
  mapfile -t refs < <("${CACHE_BIN}/kubeadm" config images list --kubernetes-version "${KUBE_VERSION}" 2>/dev/null)
  [[ ${#refs[@]} -gt 0 ]] || die "kubeadm config images list printed nothing"
  refs+=("$(sandbox_image)")
  for ref in "${refs[@]}"; do
    name="${ref##*/}" name="${name%%:*}"
    case "${name}" in
    kube-apiserver | kube-controller-manager | kube-scheduler | etcd)
      component_image "${ref}" "${base_ref}" "COPY ${name} /usr/local/bin/${name}" "${BIN}/${name}" ;;
    kube-proxy)
      component_image "${ref}" "${base_ref}" "COPY kube-proxy /usr/local/bin/kube-proxy" "${CACHE_BIN}/kube-proxy" ;;
    pause)
      component_image "${ref}" scratch $'COPY pause /pause\nUSER 65535:65535\nENTRYPOINT ["/pause"]' "${CACHE_BIN}/pause" ;;
    coredns)
      component_image "${ref}" scratch $'COPY coredns /coredns\nENTRYPOINT ["/coredns"]' "${CACHE_BIN}/coredns" ;;
    *) die "kubeadm asks for ${ref}, which hack/kind/build.sh does not know how to build" ;;
    esac
    printf '%s\n' "${ref}"
  done
  component_image "$(kube_router_image)" "${base_ref}" $'COPY kube-router /usr/local/bin/kube-router\nENTRYPOINT ["/usr/local/bin/kube-router"]' "${CACHE_BIN}/kube-router"
  kube_router_image
  printf '\n'
  component_image "$(local_path_image)" "${base_ref}" 'COPY local-path-provisioner /usr/local/bin/local-path-provisioner' "${CACHE_BIN}/local-path-provisioner"
  local_path_image
  printf '\n%s\n' "${base_ref}"
}

kind_module_dir() {
  [[ -n "${KIND_MODULE_DIR}" ]] || KIND_MODULE_DIR="$(cd "${ROOT}/hack/kind/kube" && GOWORK=off GOFLAGS=-mod=mod go mod download -json "sigs.k8s.io/kind@${KIND_VERSION}" | jq -r .Dir)"
  printf '%s' "${KIND_MODULE_DIR}"
}

# sandbox_image: the pause image containerd's configuration (kind's, in the node) names.
sandbox_image() { sed -n 's/^ *sandbox_image *= *"\(.*\)"/\1/p' "$(kind_module_dir)/images/base/files/etc/containerd/config.toml"; }

kube_router_image() {
  local v
  v="$(grep -oE 'github.com/cloudnativelabs/kube-router/v2 v[^ ]+' "${KIND_DIR}/kube-router/go.mod" | head -n 1 | cut -d' ' -f2)"
  [[ -n "${v}" ]] || die "hack/kind/kube-router/go.mod requires no github.com/cloudnativelabs/kube-router/v2"
  printf 'kagenti.local/kube-router:%s' "${v}"
}

# local_path_image: the dynamic volume provisioner of the default StorageClass.
local_path_image() {
  local v
  v="$(grep -oE 'github.com/rancher/local-path-provisioner v[^ ]+' "${KIND_DIR}/local-path/go.mod" | head -n 1 | cut -d' ' -f2)"
  [[ -n "${v}" ]] || die "hack/kind/local-path/go.mod requires no github.com/rancher/local-path-provisioner"
  printf 'kagenti.local/local-path-provisioner:%s' "${v}"
}

# default_storage <file> <helper image>: kind's default storage manifest (local-path-provisioner as
# StorageClass "standard", WaitForFirstConsumer), taken from the kind module's node image build
# with our images in place of kind's; kind create applies it from /kind/manifests.
default_storage() {
  local src; src="$(kind_module_dir)/pkg/build/nodeimage/const_storage.go"
  sed -n '/^const defaultStorageManifest = `/,/^`$/p' "${src}" | sed -e '1d' -e '$d' \
    -e "s|\` + storageProvisionerImage + \`|$(local_path_image)|" -e "s|\` + storageHelperImage + \`|$2|" > "$1"
  grep -q 'provisioner: rancher.io/local-path' "$1" && ! grep -q '`' "$1" ||
    die "no default storage manifest in ${src} (kind ${KIND_VERSION})"
}

# node_key: every input of the node image.
node_key() {
  key "${KUBE_VERSION}" "${KIND_VERSION}" "${DEBIAN_SUITE}" "${NODE_PACKAGES[*]}" "${BASE_PACKAGES[*]}" \
    "${KIND_DIR}/build.sh" "${KIND_DIR}/kube/go.sum" "${KIND_DIR}/kube/cmd/pause/main.go" "${KIND_DIR}/coredns/go.sum" \
    "${KIND_DIR}/kube-router/go.sum" "${KIND_DIR}/local-path/go.sum" "${ROOT}/hack/kube/go.sum" "${ROOT}/hack/etcd/go.sum"
}
node_image() { printf 'kagenti.local/kind-node:%s-%s' "${KUBE_VERSION}" "$(node_key)"; }

# build_node_image: the kind node, made from the node root filesystem, kind's own node files (from
# the kind module of bin/kind), the binaries and, in its containerd, the component images.
build_node_image() {
  local ref; ref="$(node_image)"
  if image_exists "${ref}"; then
    log "node image ${ref} is built"
    return 0
  fi
  build_binaries
  local images=()
  # Through a file, not a process substitution, so that a failed build stops kind-up.
  build_component_images > "${WORK}/images.txt"
  mapfile -t images < <(sed '/^$/d' "${WORK}/images.txt")
  rm -f "${WORK}/images.txt"
  local src; src="$(rootfs node "${NODE_PACKAGES[@]}")"
  local dir="${WORK}/node-build"
  log "assembling the node image ${ref}"
  rm -rf "${dir}"
  cp -a "${src}" "${dir}"
  local files; files="$(kind_module_dir)/images/base/files"
  cp -r "${files}/usr/local/bin/." "${dir}/usr/local/bin/"
  mkdir -p "${dir}/kind"
  cp -r "${files}/kind/." "${dir}/kind/"
  mkdir -p "${dir}/kind/manifests"
  default_storage "${dir}/kind/manifests/default-storage.yaml" "$(kind_base_image)"
  cp -r "${files}/etc/." "${dir}/etc/"
  chmod -R u+w,go-w "${dir}/kind" "${dir}/etc" "${dir}/usr/local/bin"
  find "${dir}/kind" "${dir}/etc/systemd" "${dir}/etc/containerd" "${dir}/etc/sysctl.d" "${dir}/etc/default" -type f -exec chmod 0644 {} +
  chmod 0755 "${dir}/kind" "${dir}/kind/bin" "${dir}"/kind/bin/* "${dir}"/usr/local/bin/*
  # The kubelet asks for oom_score_adj -998 for its pods' sandboxes, which needs CAP_SYS_RESOURCE:
  # where the machine lacks it, containerd must clamp instead of failing every pod (docs/kind.md).
  sed -i 's/^\( *restrict_oom_score_adj *=\).*/\1 true/' "${dir}/etc/containerd/config.toml"
  grep -q 'restrict_oom_score_adj = true' "${dir}/etc/containerd/config.toml" || die "kind's containerd config has no restrict_oom_score_adj to set"
  # kind's units run /usr/local/bin/containerd; Debian installs it in /usr/bin.
  ln -sf /usr/bin/containerd "${dir}/usr/local/bin/containerd"
  find "${dir}/lib/systemd/system/sysinit.target.wants/" -name systemd-tmpfiles-setup.service -delete
  rm -f "${dir}"/lib/systemd/system/multi-user.target.wants/* "${dir}"/etc/systemd/system/*.wants/* \
    "${dir}"/lib/systemd/system/local-fs.target.wants/* "${dir}"/lib/systemd/system/sockets.target.wants/*udev* \
    "${dir}"/lib/systemd/system/sockets.target.wants/*initctl* "${dir}"/lib/systemd/system/basic.target.wants/*
  echo "ReadKMsg=no" >> "${dir}/etc/systemd/journald.conf"
  chroot "${dir}" systemctl enable kubelet.service containerd.service undo-mount-hacks.service >/dev/null 2>&1
  chroot "${dir}" systemctl mask systemd-binfmt.service >/dev/null 2>&1
  mkdir -p "${dir}/etc/kubernetes/manifests" "${dir}/opt/cni/bin" "${dir}/etc/cni/net.d"
  local p
  for p in "${dir}"/usr/lib/cni/*; do ln -sf "/usr/lib/cni/${p##*/}" "${dir}/opt/cni/bin/${p##*/}"; done
  chroot "${dir}" ctr oci spec | jq '.hooks.createContainer[.hooks.createContainer|length] |= . + {"path": "/kind/bin/mount-product-files.sh"}' |
    jq 'del(.process.rlimits)' > "${dir}/etc/containerd/cri-base.json"
  install -m 0755 "${CACHE_BIN}/kubelet" "${CACHE_BIN}/kubeadm" "${BIN}/kubectl" "${dir}/usr/bin/"
  echo "${KUBE_VERSION}" > "${dir}/kind/version"
  preload_images "${dir}" "${images[@]}"
  import_rootfs "${dir}" "${ref}-rootfs"
  rm -rf "${dir}"
  # docker import (20.10) takes no STOPSIGNAL: the settings go on in a build of no files.
  component_image "${ref}" "${ref}-rootfs" $'ENV container=docker\nSTOPSIGNAL SIGRTMIN+3\nENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]'
  docker rmi "${ref}-rootfs" >/dev/null
  local old
  for old in $(docker images --format '{{.Repository}}:{{.Tag}}' kagenti.local/kind-node); do
    [[ "${old}" == "${ref}" ]] || { log "removing the node image of another version: ${old}"; docker rmi "${old}" >/dev/null || true; }
  done
  log "node image ${ref} built"
}

# preload_images <rootfs> <ref>...: puts the images into the node's containerd store, with the node's
# own containerd run against the root filesystem (no container, no registry), pinned so the kubelet's
# image garbage collection keeps them.
preload_images() {
  local dir=$1
  shift
  local tar="${WORK}/preload.tar" run="${WORK}/preload-run"
  docker save -o "${tar}" "$@"
  rm -rf "${run}"
  mkdir -p "${run}"
  cat > "${run}/config.toml" <<EOF
version = 2
root = "${dir}/var/lib/containerd"
state = "${run}/state"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "${run}/containerd.sock"
EOF
  "${dir}/usr/bin/containerd" --config "${run}/config.toml" > "${run}/containerd.log" 2>&1 &
  local pid=$! i
  for i in $(seq 40); do
    "${dir}/usr/bin/ctr" --address "${run}/containerd.sock" version >/dev/null 2>&1 && break
    sleep 0.25
  done
  local ctr=("${dir}/usr/bin/ctr" --address "${run}/containerd.sock" -n k8s.io) ref
  # Debian's ctr (containerd 1.6) has no `import --label`: the pin is a label set afterwards.
  local ok=1
  "${ctr[@]}" images import --all-platforms --no-unpack "${tar}" >/dev/null || ok=0
  for ref in "$@"; do
    ((ok)) && { "${ctr[@]}" images label "${ref}" io.cri-containerd.pinned=pinned >/dev/null || ok=0; }
  done
  if ((!ok)); then
    kill "${pid}"
    wait "${pid}" || true
    tail -n 20 "${run}/containerd.log" >&2
    die "importing the images into the node failed"
  fi
  kill "${pid}"
  wait "${pid}" || true
  rm -rf "${run}" "${tar}"
}
