# Kagenti Platform — one entry point for building, testing and running locally.
# Everything runs from Go modules: `make tools` builds the Kubernetes binaries into bin/ first.

SHELL        := /usr/bin/env bash
.SHELLFLAGS  := -euo pipefail -c
.DEFAULT_GOAL := help

ROOT     := $(CURDIR)
BIN      := $(ROOT)/bin
PILLARS  := injector tokenexchange agenttrace agentcard agentbuild netpol
# Build tags of every shipped binary (also read by the Dockerfile, hack/images.sh and the load tests),
# and of the unit tests, so that they test the configuration that ships.
GO_BUILD_TAGS := $(shell cat $(ROOT)/hack/go-build-tags)
# Modules whose packages `make test` runs (e2e runs separately against a cluster); deploy tests the
# shipped manifests on envtest.
MODULES  := pkg/duck pkg/configmap $(PILLARS) cli deploy
# Modules outside go.work (their dependencies stay their own): the example agent and the test programs of hack/.
STANDALONE := examples/agent-telemetry hack/idp hack/otlp-sink hack/gitserver hack/testsh
# Pillars with a kagenti.io/v1alpha1 API of their own.
API_PILLARS := tokenexchange agenttrace agentcard agentbuild
# Generated files `make test` checks for staleness.


export PATH              := $(BIN):$(PATH)
export KUBEBUILDER_ASSETS := $(BIN)
# envtest gives the API server 20 s to start by default; under CPU contention (a 2-core CI machine
# running several packages' suites at once) it needs more.
export KUBEBUILDER_CONTROLPLANE_START_TIMEOUT ?= 2m
# -timeout: the deploy module builds and runs the six binaries (10m, go test's default, is tight on 2 cores).
GOTEST_FLAGS ?= -race -count=1 -timeout 30m
CONTROLLER_GEN := $(BIN)/controller-gen

##@ General

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make <target>\n"} /^[a-zA-Z0-9_-]+:.*?##/ { printf "  \033[36m%-12s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) }' $(MAKEFILE_LIST)

##@ Development

.PHONY: tools
tools: ## Build etcd, kube-*, kubectl, kwok, controller-gen, helm, kind and the identity test bed (SPIRE, spiffe-helper, kagenti-dev-idp) into bin/ (cached).
	@hack/tools.sh all

.PHONY: generate
generate: ## Generate deepcopy code, CRDs (deploy/crds) and RBAC (deploy/rbac); sync them into the helm charts.
	@[[ -x $(CONTROLLER_GEN) ]] || hack/tools.sh controller-gen
	@hack/generate.sh

.PHONY: verify-generate
verify-generate: ## Fail when generated files are stale.
	@[[ -x $(CONTROLLER_GEN) ]] || hack/tools.sh controller-gen
	@hack/generate.sh --verify

.PHONY: lint
lint: ## gofmt everything; go vet every workspace module (the hack/ modules are vetted by building them).
	@out="$$(gofmt -l $(MODULES) e2e hack examples)"; \
	  if [[ -n "$$out" ]]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	@# With the shipped build tags: vet reads the code as it ships, and its compile is the one `make
	@# build` then reuses (cold, 53 s of build saved: docs/benchmarks.md).
	@go vet -tags "$(GO_BUILD_TAGS)" $(addprefix ./,$(addsuffix /...,$(MODULES) e2e))
	@# The upstream programs' wrapper modules share their dependencies' versions (Go compiles them once).
	@hack/align.sh --check

.PHONY: build
build: ## Build every pillar binary (kagenti-authbridge, the tokenexchange data plane, included) and the kagenti CLI (bin/kagenti, bin/kubectl-kagenti) into bin/.
	@for p in $(PILLARS); do go build -tags "$(GO_BUILD_TAGS)" -o $(BIN)/ ./$$p/cmd/...; done
	@go build -tags "$(GO_BUILD_TAGS)" -o $(BIN)/ ./cli/cmd/...

##@ Test

.PHONY: test
test: tools ## The one test command: generate check, lint, build, then unit + integration, manifests and local e2e, with the kind e2e beside them from the start (hack/test.sh).
	@MAKE="$(MAKE)" hack/test.sh

.PHONY: unit
unit: ## Unit and integration tests (envtest on bin/) of every module, with -race.
	@[[ -x $(BIN)/kube-apiserver && -x $(BIN)/etcd ]] || hack/tools.sh envtest
	@hack/tools.sh identity
	go test -tags "$(GO_BUILD_TAGS)" $(GOTEST_FLAGS) $(addprefix ./,$(addsuffix /...,$(MODULES)))
	@for m in $(STANDALONE); do echo "$$m (GOWORK=off)"; (cd $$m && GOWORK=off go vet ./... && GOWORK=off go test $(GOTEST_FLAGS) ./...) || exit 1; done

.PHONY: render
render: ## Render every kustomize overlay and the helm chart (kubectl kustomize, helm template, helm lint).
	@hack/render.sh

.PHONY: e2e
e2e: build ## End-to-end suite on the local (kwok) cluster: up, test, down.
	@hack/local.sh e2e

.PHONY: e2e-kind
e2e-kind: build ## End-to-end suite on kind (needs a Docker engine; skips cleanly without one).
	@hack/kind.sh

##@ Kind cluster (no registry needed: docs/kind.md)

.PHONY: kind-up
kind-up: ## Start dockerd (state in .local/kind), build the node and component images from source (cached), create a 3-node kind cluster with kube-router.
	@hack/kind-up.sh

.PHONY: run-kind
run-kind: build ## The identity flow with real containers on kind (SPIRE, spiffe-helper, the dev IdP, two agents), summarised as measured; the cluster stays up (make kind-down).
	@KAGENTI_KIND_KEEP=1 KAGENTI_KIND_SUMMARY=1 KAGENTI_KIND_RUN='^TestKindIdentityFlow$$' hack/kind.sh
	@echo "the cluster is kept: KUBECONFIG=$(ROOT)/.local/kind/kubeconfig kubectl get pods -A; make kind-down removes it"

.PHONY: kind-down
kind-down: ## Delete the kind cluster, stop the dockerd kind-up started, undo its host changes (KIND_DOWN_FLAGS=--purge also drops the caches).
	@hack/kind-down.sh $(KIND_DOWN_FLAGS)

.PHONY: bench
bench: ## Go benchmarks of every module (the env-guarded load tests and their commands: docs/benchmarks.md).
	go test -run '^$$' -bench . -benchmem $(addprefix ./,$(addsuffix /...,$(MODULES)))

# The binaries whose load test runs them as their own process (cmd/<binary>/load_test.go); one of
# them: `make load LOAD_PILLARS=netpol`.
LOAD_PILLARS ?= tokenexchange agenttrace agentbuild injector agentcard netpol
# Objects per load test (KAGENTI_LOAD_N): 10000 for the scale runs, e.g. `make load LOAD_N=10000`.
LOAD_N ?= 1000

.PHONY: load
load: ## Load tests of LOAD_PILLARS (default: all six; e.g. LOAD_PILLARS=netpol LOAD_N=10000), each controller as its own process (output: LOAD lines).
	@[[ -x $(BIN)/kube-apiserver && -x $(BIN)/etcd ]] || hack/tools.sh envtest
	@set -e; for p in $(LOAD_PILLARS); do \
		KAGENTI_LOAD=1 KAGENTI_LOAD_N=$(LOAD_N) go test -count=1 -run '^TestLoad$$' -v -timeout 180m ./$$p/cmd/kagenti-$$p/; \
	done

##@ Local cluster

.PHONY: up
up: build ## Start the local kwok cluster, install the CRDs and run every pillar binary against it.
	@hack/local.sh up

.PHONY: down
down: ## Stop everything `make up` started and delete the local cluster.
	@hack/local.sh down

.PHONY: run
run: build ## make up, apply deploy/samples, summarise what each pillar did, stream logs until Ctrl-C.
	@hack/local.sh run

##@ Images

.PHONY: images
images: ## Build one container image per binary, kagenti-authbridge and kagenti-agentcard-federation-member included, on a locally made base (IMAGES_BUILD=dockerfile: the registry path).
	@hack/images.sh $(PILLARS) authbridge agentcard-federation-member
