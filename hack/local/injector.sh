# Local-cluster hooks of the injector (sourced by hack/local.sh; see docs/development.md).
# The webhook runs as a local process on 127.0.0.1:19443 with a self-generated certificate and is
# registered by URL; the kwok cluster never pulls images, so the pinned default images are fine.

injector_certs() { echo "${LOCAL}/injector-certs"; }

injector_pre_start() {
  local dir; dir="$(injector_certs)"
  "${BIN}/kagenti-injector" gen-certs --out-dir "${dir}" --host 127.0.0.1 >/dev/null
  # The built-in defaults, written out so that the hot reload can be tried by editing this file.
  cat > "${LOCAL}/injector-config.yaml" <<'YAML'
sidecarMode: native
spireSocket:
  type: csi
YAML
}

injector_args() {
  echo --cert-dir
  echo "$(injector_certs)"
  echo --webhook-port
  echo 19443
  echo --webhook-host
  echo 127.0.0.1
  echo --namespace
  echo kagenti-system
  echo --config
  echo "${LOCAL}/injector-config.yaml"
}

injector_post_start() {
  local ca; ca="$(base64 -w0 < "$(injector_certs)/ca.crt")"
  kubectl apply -f - >/dev/null <<YAML
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: kagenti-injector
webhooks:
- name: inject.kagenti.io
  admissionReviewVersions: [v1]
  sideEffects: None
  timeoutSeconds: 10
  failurePolicy: Fail
  matchPolicy: Equivalent
  reinvocationPolicy: Never
  clientConfig:
    url: https://127.0.0.1:19443/mutate
    caBundle: ${ca}
  rules:
  - apiGroups: [apps]
    apiVersions: [v1]
    operations: [CREATE, UPDATE]
    resources: [deployments, statefulsets, daemonsets]
    scope: Namespaced
  - apiGroups: [batch]
    apiVersions: [v1]
    operations: [CREATE, UPDATE]
    resources: [jobs, cronjobs]
    scope: Namespaced
  namespaceSelector:
    matchExpressions:
    - {key: kagenti.io/injection, operator: In, values: [enabled, "true"]}
    - {key: kubernetes.io/metadata.name, operator: NotIn, values: [kube-system, kagenti-system]}
  objectSelector:
    matchExpressions:
    - {key: kagenti.io/inject, operator: Exists}
YAML
}

injector_summary() {
  local pods
  pods="$(kubectl -n agents get pods -l app=weather-agent \
    -o jsonpath='{range .items[*]}{.metadata.name}{": init="}{range .spec.initContainers[*]}{.name}{" "}{end}{"containers="}{range .spec.containers[*]}{.name}{" "}{end}{"\n"}{end}' 2>/dev/null)"
  if [[ -z "${pods}" ]]; then
    echo "injector: no weather-agent pods in namespace agents yet"
    return 0
  fi
  echo "injector: identity infrastructure injected into the weather-agent pods:"
  sed 's/^/  /' <<<"${pods}"
}
