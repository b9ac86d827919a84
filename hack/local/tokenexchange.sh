# Local-cluster hooks for kagenti-tokenexchange (sourced by hack/local.sh; see docs/development.md).

tokenexchange_args() {
  echo "--zap-log-level=info"
}

# tokenexchange_summary: what the controller did for the sample weather-agent.
tokenexchange_summary() {
  local ns=agents name=weather-agent-auth cm=weather-agent-token-exchange
  if ! kubectl get tokenexchange -n "${ns}" "${name}" >/dev/null 2>&1; then
    echo "tokenexchange: no TokenExchange ${ns}/${name} (apply deploy/samples/tokenexchange.yaml)"
    return 0
  fi
  kubectl get tokenexchange -n "${ns}" "${name}" -o \
    jsonpath='{"tokenexchange: "}{.metadata.name}{" phase="}{.status.phase}{" ready="}{.status.conditions[?(@.type=="Ready")].reason}{" configuredPods="}{.status.configuredPods}{"\n  "}{.status.message}{"\n"}'
  if kubectl get configmap -n "${ns}" "${cm}" >/dev/null 2>&1; then
    echo "  ConfigMap ${ns}/${cm}: $(kubectl get configmap -n "${ns}" "${cm}" -o jsonpath='{.data}' | wc -c) bytes (config.yaml, routes.yaml, helper.conf)"
  else
    echo "  ConfigMap ${ns}/${cm}: missing"
  fi
}
