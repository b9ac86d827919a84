# Local-cluster hooks for kagenti-tokenexchange (sourced by hack/local.sh; see docs/development.md).
# The validating webhook runs in the local process on 127.0.0.1:19444 with a local certificate
# (written by the injector's gen-certs) and is registered by URL, as the injector's is. In a cluster
# the built-in rotator provides the certificate instead.

tokenexchange_certs() { echo "${LOCAL}/tokenexchange-certs"; }

# The webhook needs a certificate; without the injector binary to write one, the controller runs
# without it (it applies the same checks itself: Ready=False, reason InvalidSpec).
tokenexchange_webhook() { [[ -x "${BIN}/kagenti-injector" ]]; }

tokenexchange_pre_start() {
  if tokenexchange_webhook; then
    "${BIN}/kagenti-injector" gen-certs --out-dir "$(tokenexchange_certs)" --host 127.0.0.1 >/dev/null
  else
    warn "bin/kagenti-injector missing: kagenti-tokenexchange runs without its validating webhook"
  fi
}

tokenexchange_args() {
  echo "--zap-log-level=info"
  if tokenexchange_webhook; then
    printf '%s\n' --webhook --webhook-host 127.0.0.1 --webhook-port 19444 --cert-dir "$(tokenexchange_certs)"
  fi
}

tokenexchange_post_start() {
  tokenexchange_webhook || return 0
  local ca; ca="$(base64 -w0 < "$(tokenexchange_certs)/ca.crt")"
  # The shipped configuration, registered by URL instead of through the in-cluster Service.
  sed -e '/^    service:$/,/^      port: 443$/d' \
      -e "s|^  clientConfig:$|  clientConfig:\n    url: https://127.0.0.1:19444/validate-kagenti-io-v1alpha1-tokenexchange\n    caBundle: ${ca}|" \
      "${ROOT}/deploy/kustomize/tokenexchange/validatingwebhookconfiguration.yaml" | kubectl apply -f - >/dev/null
}

# tokenexchange_summary: what the controller did for the sample weather-agent.
tokenexchange_summary() {
  local ns=agents name=weather-agent-auth cm=weather-agent-token-exchange
  if ! kubectl get tokenexchange -n "${ns}" "${name}" >/dev/null 2>&1; then
    echo "tokenexchange: no TokenExchange ${ns}/${name} (apply deploy/samples/tokenexchange.yaml)"
    return 0
  fi
  kubectl get tokenexchange -n "${ns}" "${name}" -o \
    jsonpath='{"tokenexchange: "}{.metadata.name}{" phase="}{.status.phase}{" ready="}{.status.conditions[?(@.type=="Ready")].reason}{" pods="}{.status.pods}{" configuredPods="}{.status.configuredPods}{"\n  "}{.status.message}{"\n"}'
  if kubectl get configmap -n "${ns}" "${cm}" >/dev/null 2>&1; then
    # What the ConfigMap holds, as read back from the API server: each key and its size.
    echo "  ConfigMap ${ns}/${cm}: $(kubectl get configmap -n "${ns}" "${cm}" -o go-template='{{range $k, $v := .data}}{{$k}} ({{len $v}} bytes) {{end}}')"
  else
    echo "  ConfigMap ${ns}/${cm}: missing"
  fi
  if kubectl get validatingwebhookconfiguration kagenti-tokenexchange >/dev/null 2>&1; then
    echo "  validating webhook: registered (clientNameTemplate, as the CRD's CEL rule)"
  fi
  # The sample's pods run nothing here (kwok); the e2e test below runs injected pods' containers.
  echo "  identity flow with real sidecars, SPIRE and an IdP (root, after this run ends):"
  echo "    flock /tmp/kagenti-local.lock hack/local.sh e2e -run TestIdentityFlow   (docs/identity.md)"
}
