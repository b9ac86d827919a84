#!/usr/bin/env bash
# AgentBuild's surroundings on the kind cluster (make e2e-kind's stage "tekton"; docs/kind.md), all
# built here from pinned sources:
#   - Tekton Pipelines (hack/kind/tekton pins the version): its controller, webhook and the programs
#     its task pods run (entrypoint, nop, sidecarlogresults, workingdirinit) built from the Go module
#     proxy, each at /ko-app/<name> on the static base as Tekton's own images have them, and the
#     kind base run as nonroot as its shell image; installed from the release's own manifests
#     (config/ of the module) with those images in place of ko://;
#   - an OCI registry (CNCF Distribution, hack/kind/registry) in kagenti-system, where the shipped
#     build templates push by default and the nodes pull from (hack/kind/registry.yaml);
#   - a git server (hack/gitserver: git's http-backend) holding one repository, agent.git: the
#     example agent (examples/agent-telemetry) with its modules vendored and a Dockerfile;
#   - the build tools image: Debian's git and buildah (the clone and build steps' programs), and the
#     Go toolchain image the Dockerfile compiles with, pushed to the registry.
# Needs kind-up's engine and cluster (KUBECONFIG) and the static base of hack/images.sh.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
source "${KIND_DIR}/build.sh"
export PATH="${BIN}:${PATH}"
export KUBECONFIG="${KUBECONFIG:-${KIND_KUBECONFIG}}"

TEKTON_VERSION="$(grep -oE 'github.com/tektoncd/pipeline v[^ ]+' "${KIND_DIR}/tekton/go.mod" | head -n 1 | cut -d' ' -f2)"
REGISTRY_VERSION="$(grep -oE 'github.com/distribution/distribution/v3 v[^ ]+' "${KIND_DIR}/registry/go.mod" | head -n 1 | cut -d' ' -f2)"
[[ -n "${TEKTON_VERSION}" && -n "${REGISTRY_VERSION}" ]] || die "hack/kind/tekton or hack/kind/registry pins no version"
TEKTON_PROGRAMS=(controller webhook entrypoint nop sidecarlogresults workingdirinit)
# The in-cluster registry's name (the templates' REGISTRY) and the repositories the suite uses.
REGISTRY_HOST=registry.kagenti-system.svc.cluster.local:5000
GO_VERSION="$(go env GOVERSION)"
# Debian's git and buildah, and what buildah needs that debootstrap does not resolve by itself
# (containers-common depends on a virtual package, container-network-stack) or only recommends
# (runc, for RUN instructions).
BUILD_TOOLS_PACKAGES=(git ca-certificates buildah golang-github-containers-common containernetworking-plugins runc uidmap)
mkdir -p "${WORK}"

shell_image() { local b; b="$(kind_base_image)"; printf 'kagenti.local/tekton-shell:%s' "${b##*:}"; }
tekton_image() { printf 'kagenti.local/tekton-%s:%s' "$1" "${TEKTON_VERSION}"; }
static_base_image() { "${ROOT}/hack/images.sh" --static-base; }

# build_images: prints the references to load into the nodes.
build_images() {
  local p
  go_build "${KIND_DIR}/tekton" "$(key "${KIND_DIR}/tekton/go.mod" "${KIND_DIR}/tekton/go.sum")" 0 "" \
    "${TEKTON_PROGRAMS[@]/#/github.com/tektoncd/pipeline/cmd/}"
  go_build "${KIND_DIR}/registry" "$(key "${KIND_DIR}/registry/go.mod" "${KIND_DIR}/registry/go.sum")" 0 "" \
    github.com/distribution/distribution/v3/cmd/registry
  go_build "${ROOT}/hack/gitserver" "$(key "${ROOT}/hack/gitserver/go.mod" "${ROOT}/hack/gitserver/main.go")" 0 "" \
    github.com/kagenti/platform/hack/gitserver
  local static; static="$(static_base_image)"
  for p in "${TEKTON_PROGRAMS[@]}"; do
    image_exists "$(tekton_image "$p")" ||
      component_image "$(tekton_image "$p")" "${static}" "COPY ${p} /ko-app/${p}
USER 65532:65532
ENTRYPOINT [\"/ko-app/${p}\"]" "${CACHE_BIN}/${p}"
    tekton_image "$p"
    printf '\n'
  done
  # Tekton's shell image (its place-scripts init container) runs as nonroot, as Tekton's default
  # (Chainguard's busybox) does: an AgentBuild's pods are runAsNonRoot.
  image_exists "$(shell_image)" || component_image "$(shell_image)" "$(kind_base_image)" 'USER 65532:65532'
  printf '%s\n' "$(shell_image)"
  local registry="kagenti.local/registry:${REGISTRY_VERSION}"
  image_exists "${registry}" ||
    component_image "${registry}" "${static}" $'COPY registry /registry\nUSER 65532:65532\nENTRYPOINT ["/registry"]' "${CACHE_BIN}/registry"
  printf '%s\n' "${registry}"
  local tools; tools="$(build_tools_image)"
  printf '%s\n' "${tools}"
  printf '%s\n' "$(gitserver_image "${tools}")"
}

# build_tools_image: Debian's git and buildah, the programs of the shipped clone and build steps
# (their images, alpine/git and quay.io/buildah, are not reachable here), set up as buildah's own
# image is for rootless builds: a user "build" (1000, the build step's runAsUser) with subordinate
# IDs, and newuidmap/newgidmap with file capabilities (cap_setuid, cap_setgid) instead of Debian's
# setuid bit, so that they map the build's user namespace as the build user itself, which needs no
# CAP_SYS_ADMIN. The import keeps the capabilities (tar --xattrs).
build_tools_image() {
  local dir; dir="$(rootfs buildtools "${BUILD_TOOLS_PACKAGES[@]}")"
  local ref; ref="kagenti.local/build-tools:$(key "$(basename "${dir}")" "${BASH_SOURCE[0]}")"
  if ! image_exists "${ref}"; then
    local tmp="${WORK}/build-tools-rootfs"
    rm -rf "${tmp}"
    cp -a "${dir}" "${tmp}"
    chmod u-s,g-s "${tmp}/usr/bin/newuidmap" "${tmp}/usr/bin/newgidmap"
    setcap cap_setuid=ep "${tmp}/usr/bin/newuidmap" && setcap cap_setgid=ep "${tmp}/usr/bin/newgidmap" ||
      die "setcap on newuidmap/newgidmap failed (setcap is in Debian's libcap2-bin)"
    printf 'build:x:1000:1000:build:/home/build:/bin/sh\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >> "${tmp}/etc/passwd"
    printf 'build:x:1000:\nnonroot:x:65532:\n' >> "${tmp}/etc/group"
    printf 'build:100000:65536\n' | tee "${tmp}/etc/subuid" > "${tmp}/etc/subgid"
    mkdir -p "${tmp}/home/build" "${tmp}/home/nonroot"
    chown 1000:1000 "${tmp}/home/build"
    chown 65532:65532 "${tmp}/home/nonroot"
    tar -C "${tmp}" --xattrs --xattrs-include=security.capability --exclude=./.complete -c . | docker import - "${ref}" >/dev/null
    rm -rf "${tmp}"
  fi
  printf '%s' "${ref}"
}

# agent_repository <dir>: the bare repository agent.git: examples/agent-telemetry, its modules
# vendored (the build needs no network), and a Dockerfile that compiles it with the Go toolchain
# image of the registry and puts it on the static base there. One commit, dated 2000-01-01 so the
# same sources make the same commit.
agent_repository() {
  local out=$1 src="${WORK}/agent-src"
  rm -rf "${src}" "${out}"
  mkdir -p "${src}"
  cp -r "${ROOT}/examples/agent-telemetry/." "${src}/"
  (cd "${src}" && GOWORK=off GOFLAGS=-mod=mod go mod vendor)
  cat > "${src}/Dockerfile" <<EOF
FROM ${REGISTRY_HOST}/kagenti/golang:${GO_VERSION} AS build
WORKDIR /src
COPY . .
ENV CGO_ENABLED=0 GOFLAGS=-mod=vendor GOTOOLCHAIN=local GOCACHE=/tmp/gocache HOME=/tmp
RUN ["/usr/local/go/bin/go", "build", "-trimpath", "-o", "/tmp/agent-telemetry", "."]
FROM ${REGISTRY_HOST}/kagenti/static-base:latest
COPY --from=build /tmp/agent-telemetry /agent-telemetry
USER 65532:65532
ENTRYPOINT ["/agent-telemetry"]
EOF
  local g=(git -C "${src}" -c user.name=kagenti -c user.email=kagenti@localhost)
  "${g[@]}" init -q -b main
  "${g[@]}" add -A
  GIT_AUTHOR_DATE=2000-01-01T00:00:00Z GIT_COMMITTER_DATE=2000-01-01T00:00:00Z "${g[@]}" commit -q -m "example agent"
  git clone -q --bare "${src}" "${out}"
  rm -rf "${src}"
}

# gitserver_image <build tools image>: the git server with agent.git.
gitserver_image() {
  local ctx="${WORK}/gitserver-ctx"
  rm -rf "${ctx}"
  mkdir -p "${ctx}"
  agent_repository "${ctx}/agent.git"
  cp "${CACHE_BIN}/gitserver" "${ctx}/"
  # The repository belongs to the user the server runs as: git refuses to serve one of another
  # owner ("dubious ownership").
  printf 'FROM %s\nCOPY gitserver /usr/local/bin/gitserver\nCOPY --chown=65532:65532 agent.git /srv/git/agent.git\nUSER 65532:65532\n' "$1" > "${ctx}/Dockerfile"
  local k; k="$( (cd "${ctx}" && git --git-dir=agent.git rev-parse HEAD; sha256sum gitserver Dockerfile) | sha256sum | cut -c1-16)"
  local ref="kagenti.local/gitserver:${k}"
  if ! image_exists "${ref}"; then
    docker build -q -t "${ref}" "${ctx}" > "${ctx}.log" 2>&1 || { cat "${ctx}.log" >&2; die "docker build of ${ref} failed"; }
    rm -f "${ctx}.log"
  fi
  rm -rf "${ctx}"
  printf '%s' "${ref}"
}

# install_tekton: the release's manifests (namespaces, RBAC, CRDs, webhooks, configuration,
# controller, webhook; not the resolvers nor the events controller, which AgentBuild does not use)
# with our images, then waits for both Deployments.
install_tekton() {
  local cfg; cfg="$(cd "${KIND_DIR}/tekton" && GOWORK=off go list -m -f '{{.Dir}}' github.com/tektoncd/pipeline)/config"
  local shell; shell="$(shell_image)"
  local files=("${cfg}"/100-namespace/*.yaml "${cfg}"/200-*.yaml "${cfg}"/201-*.yaml "${cfg}"/300-crds/*.yaml
    "${cfg}"/500-webhooks.yaml "${cfg}"/config-*.yaml "${cfg}"/controller.yaml "${cfg}"/webhook.yaml)
  local sedargs=() p
  for p in "${TEKTON_PROGRAMS[@]}"; do sedargs+=(-e "s|ko://github.com/tektoncd/pipeline/cmd/${p}\"|$(tekton_image "$p")\"|" -e "s|ko://github.com/tektoncd/pipeline/cmd/${p}\$|$(tekton_image "$p")|"); done
  sedargs+=(-e "s|\"-shell-image\", \"[^\"]*\"|\"-shell-image\", \"${shell}\"|")
  local f
  for f in "${files[@]}"; do printf -- '---\n'; cat "$f"; printf '\n'; done | sed "${sedargs[@]}" > "${WORK}/tekton.yaml"
  ! grep -n 'ko://' "${WORK}/tekton.yaml" || die "Tekton's manifests name an image hack/kind/tekton.sh does not build"
  kubectl apply --server-side -f "${WORK}/tekton.yaml" >/dev/null
  kubectl -n tekton-pipelines rollout status deploy/tekton-pipelines-controller --timeout=180s >/dev/null &&
    kubectl -n tekton-pipelines rollout status deploy/tekton-pipelines-webhook --timeout=180s >/dev/null ||
    { kubectl -n tekton-pipelines get pods -o wide >&2; kubectl -n tekton-pipelines logs --all-containers --tail 30 -l app.kubernetes.io/part-of=tekton-pipelines >&2 || true; die "Tekton did not become ready"; }
}

# install_registry <registry image> <gitserver image>
install_registry() {
  # Its namespace, which hack/kind.sh's install may be creating at the same moment.
  ensure_namespace kagenti-system
  sed -e "s|image: REGISTRY_IMAGE|image: $1|" -e "s|image: GITSERVER_IMAGE|image: $2|" "${KIND_DIR}/registry.yaml" |
    kubectl apply --server-side -f - >/dev/null
  kubectl -n kagenti-system rollout status deploy/registry --timeout=120s >/dev/null &&
    kubectl -n kagenti-system rollout status deploy/gitserver --timeout=120s >/dev/null ||
    { kubectl -n kagenti-system get pods -o wide >&2; die "the registry or the git server did not become ready"; }
}

# push_build_bases: the images the Dockerfile starts from, pushed into the in-cluster registry
# through a port-forward (dockerd pushes to localhost over plain HTTP): the Go toolchain of this
# machine (GOROOT, without its tests and documentation) and the static base.
push_build_bases() {
  local golang="kagenti.local/golang:${GO_VERSION}" goroot; goroot="$(go env GOROOT)"
  if ! image_exists "${golang}"; then
    local ctx="${WORK}/golang-ctx"
    rm -rf "${ctx}"
    mkdir -p "${ctx}/go"
    tar -C "${goroot}" --exclude='*_test.go' --exclude=testdata --exclude=./api --exclude=./doc --exclude=./test \
      --exclude=./misc --exclude=./pkg/obj -c . | tar -C "${ctx}/go" -x
    printf 'FROM %s\nCOPY go /usr/local/go\nENV PATH=/usr/local/go/bin:/usr/bin:/bin\n' "$(static_base_image)" > "${ctx}/Dockerfile"
    docker build -q -t "${golang}" "${ctx}" > "${ctx}.log" 2>&1 || { cat "${ctx}.log" >&2; die "docker build of ${golang} failed"; }
    rm -rf "${ctx}" "${ctx}.log"
  fi
  local port=15000
  kubectl -n kagenti-system port-forward svc/registry "${port}:5000" > "${WORK}/port-forward.log" 2>&1 &
  local pf=$!
  trap 'kill '"${pf}"' 2>/dev/null || true' RETURN
  local i
  for i in $(seq 40); do curl -fsS "http://localhost:${port}/v2/" >/dev/null 2>&1 && break; sleep 0.25; done
  local src dst
  for src in "${golang}" "$(static_base_image)"; do
    case "${src}" in
    kagenti.local/golang:*) dst="localhost:${port}/kagenti/golang:${GO_VERSION}" ;;
    *) dst="localhost:${port}/kagenti/static-base:latest" ;;
    esac
    docker tag "${src}" "${dst}"
    docker push -q "${dst}" >/dev/null || die "docker push ${dst} failed (port-forward: $(cat "${WORK}/port-forward.log"))"
    docker rmi "${dst}" >/dev/null
  done
}

# tekton.sh [images|install]: images builds the images and lists them in .local/kind/tekton-images.txt
# (hack/kind.sh builds them beside kind-up and loads them with its own); install loads nothing and
# installs; without an argument, both, with the images loaded into the workers in between.
what="${1:-all}"
case "${what}" in all | images | install) ;; *) die "usage: hack/kind/tekton.sh [images|install]" ;; esac
if [[ "${what}" != install ]]; then
  stage tekton-images
  # Through a file, not a process substitution, so that a failed build stops here.
  build_images > "${WORK}/tekton-images.txt.new"
  sed '/^$/d' "${WORK}/tekton-images.txt.new" > "${WORK}/tekton-images.txt"
  rm -f "${WORK}/tekton-images.txt.new"
  [[ "${what}" == images ]] && { stage done; exit 0; }
fi
mapfile -t images < "${WORK}/tekton-images.txt" ||:
((${#images[@]} >= 3)) || die "no images listed in ${WORK#"${ROOT}/"}/tekton-images.txt: run hack/kind/tekton.sh images first"
[[ "${what}" == all ]] && load_into_workers "${images[@]}"
stage tekton-install
install_tekton
install_registry "kagenti.local/registry:${REGISTRY_VERSION}" "${images[-1]}"
push_build_bases
printf 'KAGENTI_E2E_BUILD_TOOLS_IMAGE=%s\n' "${images[-2]}" > "${WORK}/tekton.env"
stage done
