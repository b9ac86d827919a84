# Local-cluster hooks of the netpol pillar (sourced by hack/local.sh).
#
# kwok simulates pods but no network, so NetworkPolicies are written and reported but not enforced
# here. netpol runs in enforce mode with the same defaults as in a real cluster.

netpol_args() {
  echo "--mode=enforce"
  echo "--operator-namespace=kagenti-system"
  echo "--crd-poll-interval=2s"
}

# netpol_summary prints, for every AgentCard in the sample namespace, agentcard's verdict (the
# Verified condition netpol follows), its policy and whether it is permissive or restrictive.
netpol_summary() {
  local rows i
  # netpol follows agentcard's verdict within a reconcile; give a fresh verdict a few seconds to land.
  for i in $(seq 1 15); do
    rows="$(kubectl -n agents get agentcards.kagenti.io -o go-template='{{range .items}}{{.metadata.name}}{{"\t"}}{{range .status.conditions}}{{if eq .type "Verified"}}{{.status}}{{end}}{{end}}{{"\t"}}{{range .status.conditions}}{{if eq .type "NetworkPolicyReady"}}{{.status}}{{"\t"}}{{.reason}}{{"\t"}}{{.message}}{{end}}{{end}}{{"\n"}}{{end}}' 2>/dev/null)" || {
      echo "AgentCards: the AgentCard CRD is not installed; netpol is waiting for it (readyz says so)"
      return 0
    }
    [[ "${rows}" == *$'True\tTrue\tRestrictive'* || "${rows}" == *$'\t\t'* ]] || break
    sleep 1
  done
  if [[ -z "${rows}" ]]; then
    echo "no AgentCards in namespace agents: no NetworkPolicies written"
    return 0
  fi
  local card verified ready reason message
  while IFS=$'\t' read -r card verified ready reason message; do
    [[ -n "${card}" ]] || continue
    echo "AgentCard agents/${card}: Verified=${verified:-<not reported>}, NetworkPolicyReady=${ready:-<none>} (${reason:-not reconciled yet})"
    [[ -n "${message}" ]] && echo "  ${message}"
  done <<<"${rows}"
  kubectl -n agents get networkpolicies -l app.kubernetes.io/managed-by=kagenti-netpol \
    -o go-template='{{range .items}}NetworkPolicy agents/{{.metadata.name}}: {{index .metadata.annotations "kagenti.io/policy"}} ({{index .metadata.annotations "kagenti.io/verification"}}){{"\n"}}{{end}}' 2>/dev/null || true
}
