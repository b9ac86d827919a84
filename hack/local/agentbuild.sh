# Local-cluster hooks of the agentbuild pillar (sourced by hack/local.sh).

agentbuild_args() {
  echo "--template-namespace=kagenti-system"
  echo "--tekton-check-interval=10s"
}

# The default build templates live in kagenti-system, like in a real installation.
agentbuild_pre_start() {
  kubectl create namespace kagenti-system --dry-run=client -o yaml | kubectl apply -f - >/dev/null
  kubectl apply -n kagenti-system -k "${ROOT}/deploy/kustomize/agentbuild/templates" >/dev/null
}

agentbuild_summary() {
  local out
  out="$(kubectl -n agents get agentbuilds.kagenti.io weather-agent -o go-template='{{.status.phase}}{{"\t"}}{{range .status.conditions}}{{if eq .type "Ready"}}{{.status}}{{"\t"}}{{.reason}}{{"\t"}}{{.message}}{{end}}{{end}}' 2>/dev/null)" || {
    echo "AgentBuild agents/weather-agent: not found (deploy/samples/agentbuild.yaml not applied?)"
    return 0
  }
  local phase ready reason message
  IFS=$'\t' read -r phase ready reason message <<<"${out}"
  echo "AgentBuild agents/weather-agent: phase ${phase:-<none>}, Ready=${ready:-<none>} (${reason:-no reason yet})"
  if [[ "${reason}" == "TektonNotInstalled" ]]; then
    echo "This local cluster has no Tekton Pipelines, so the build stays Pending: nothing is built and"
    echo "the weather-agent Deployment keeps its image. Install Tekton's CRDs and the build starts by itself."
  elif [[ -n "${message}" ]]; then
    echo "${message}"
  fi
}
