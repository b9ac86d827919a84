# Local-cluster hooks for kagenti-agenttrace (sourced by hack/local.sh; see docs/development.md).

agenttrace_args() {
  echo "--zap-log-level=info"
}

# agenttrace_summary: what the controller did for the sample weather-agent.
agenttrace_summary() {
  local ns=agents name=weather-agent-trace cm=weather-agent-trace
  if ! kubectl get agenttrace -n "${ns}" "${name}" >/dev/null 2>&1; then
    echo "agenttrace: no AgentTrace ${ns}/${name} (apply deploy/samples/agenttrace.yaml)"
    return 0
  fi
  kubectl get agenttrace -n "${ns}" "${name}" -o \
    jsonpath='{"agenttrace: "}{.metadata.name}{" phase="}{.status.phase}{" ready="}{.status.conditions[?(@.type=="Ready")].status}{"/"}{.status.conditions[?(@.type=="Ready")].reason}{" configuredPods="}{.status.configuredPods}{"\n"}'
  if kubectl get configmap -n "${ns}" "${cm}" >/dev/null 2>&1; then
    echo "  ConfigMap ${ns}/${cm}: endpoint=$(kubectl get configmap -n "${ns}" "${cm}" -o jsonpath='{.data.otel_endpoint}')" \
      "sampler=$(kubectl get configmap -n "${ns}" "${cm}" -o jsonpath='{.data.sampler}')/$(kubectl get configmap -n "${ns}" "${cm}" -o jsonpath='{.data.sampler_arg}')" \
      "(files: otel.env, otel-config.yaml, config.json, one per key; mounted at /etc/kagenti/trace)"
  else
    echo "  ConfigMap ${ns}/${cm}: missing"
  fi
}
