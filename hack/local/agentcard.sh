# Local-cluster hooks of the agentcard pillar (sourced by hack/local.sh).
#
# kwok pods run no containers, so a small local process stands in for the weather-agent's card
# endpoint: `kagenti-agentcard serve-sample-card` serves a card SIGNED by an SVID for
# spiffe://cluster.local/ns/agents/sa/weather-agent (issued by a dev CA made in pre_start) on each
# weather-agent pod's loopback IP, port 8081. It exits on its own when the controller stops (it
# follows the controller's PID), so `make down` stops it too; its PID is in .local/pids/agentcard-sample.pid.
#
# The discovery API serves HTTPS on 127.0.0.1:18100 with a certificate for 127.0.0.1 and localhost
# from `kagenti-injector gen-certs` (the local cluster has no Service network for the rotator's
# certificate to name), given with --discovery-cert-dir; the controller publishes its CA in the
# ConfigMap kagenti-system/kagenti-agentcard-discovery-ca, as in a cluster.

AGENTCARD_DIR="${LOCAL}/agentcard"
AGENTCARD_DISCOVERY_CERTS="${AGENTCARD_DIR}/discovery-certs"

agentcard_args() {
  echo "--discovery-bind-address=127.0.0.1:18100"
  echo "--discovery-cert-dir=${AGENTCARD_DISCOVERY_CERTS}"
  echo "--discovery-namespace=kagenti-system"
  echo "--trust-bundle-configmap=kagenti-system/spire-bundle"
  echo "--trust-bundle-key=bundle.crt"
  echo "--trust-domain=cluster.local"
}

# agentcard_pre_start creates the dev CA and publishes it as the trust bundle ConfigMap, the way
# SPIRE's k8sbundle notifier would.
agentcard_pre_start() {
  mkdir -p "${AGENTCARD_DIR}"
  if [[ ! -s "${AGENTCARD_DIR}/ca.crt" ]]; then
    "${BIN}/kagenti-agentcard" dev-ca --trust-domain cluster.local --out-dir "${AGENTCARD_DIR}"
  fi
  [[ -x "${BIN}/kagenti-injector" ]] ||
    die "the agentcard discovery API's local certificate is made with bin/kagenti-injector gen-certs: build it with 'make build'"
  "${BIN}/kagenti-injector" gen-certs --out-dir "${AGENTCARD_DISCOVERY_CERTS}" --host 127.0.0.1 --host localhost >/dev/null
  kubectl create namespace kagenti-system --dry-run=client -o yaml | kubectl apply -f - >/dev/null
  kubectl -n kagenti-system create configmap spire-bundle --from-file=bundle.crt="${AGENTCARD_DIR}/ca.crt" \
    --dry-run=client -o yaml | kubectl apply --server-side --field-manager hack-local --force-conflicts -f - >/dev/null
}

agentcard_post_start() {
  local parent
  parent="$(<"${LOCAL}/pids/agentcard.pid")"
  nohup "${BIN}/kagenti-agentcard" serve-sample-card --card "${ROOT}/hack/local/weather-agent-card.json" \
    --kubeconfig "${KUBECONFIG}" --namespace agents --selector app=weather-agent --port 8081 \
    --ca-cert "${AGENTCARD_DIR}/ca.crt" --ca-key "${AGENTCARD_DIR}/ca.key" \
    --spiffe-id spiffe://cluster.local/ns/agents/sa/weather-agent \
    --parent-pid "${parent}" >"${LOGS}/agentcard-sample.log" 2>&1 &
  echo $! >"${LOCAL}/pids/agentcard-sample.pid"
}

# agentcard_summary prints each AgentCard of the sample namespace: agent, version, skills, verified.
agentcard_summary() {
  local i rows
  for i in $(seq 1 30); do
    rows="$(kubectl -n agents get agentcards.kagenti.io -o go-template='{{range .items}}{{.metadata.name}}{{"\t"}}{{with .status.card}}{{.name}}{{"\t"}}{{.version}}{{"\t"}}{{range $i, $s := .skills}}{{if $i}}, {{end}}{{$s.id}}{{end}}{{else}}-{{"\t"}}-{{"\t"}}-{{end}}{{"\t"}}{{with .status.signature}}{{if .verified}}verified{{else}}not verified ({{.reason}}){{end}}{{else}}not verified{{end}}{{"\t"}}{{with .status.binding}}{{if .bound}}bound to {{.expectedSpiffeID}}{{else}}not bound ({{.reason}}){{end}}{{end}}{{"\t"}}{{.status.discoveredPods}}{{"\n"}}{{end}}' 2>/dev/null || true)"
    [[ "${rows}" == *verified* && "${rows}" != *"not verified"* ]] && break
    sleep 1
  done
  if [[ -z "${rows}" ]]; then
    echo "no AgentCards in namespace agents yet"
    return 0
  fi
  local name agent version skills verified bound pods
  while IFS=$'\t' read -r name agent version skills verified bound pods; do
    [[ -n "${name}" ]] || continue
    echo "AgentCard agents/${name}: \"${agent}\" ${version}, ${pods:-0} pod(s), ${verified}, ${bound}"
    echo "  skills: ${skills}"
  done <<<"${rows}"
  echo "discovery API: curl --cacert $(rel "${AGENTCARD_DISCOVERY_CERTS}")/ca.crt -H \"Authorization: Bearer \$(kubectl create token default -n agents)\" 'https://127.0.0.1:18100/v1/agents?namespace=agents'"
}
