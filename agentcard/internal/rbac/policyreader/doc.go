// Package policyreader holds the RBAC markers of ClusterRole kagenti-agentcard-policyreader: what
// the discovery API needs to answer "which agents may I call" (--discovery-policies), reading the
// authorization policy of each workload from the ConfigMaps tokenexchange writes
// ({workload}-token-exchange). RBAC cannot select ConfigMaps by label, so this is list and watch
// on every ConfigMap: a separate role, bound only where the feature is turned on (helm
// agentcard.discovery.policies, kustomize component agentcard-discovery-policies), so that an
// install without it reads no ConfigMap but the trust bundle (TestRBACReadsOnlyTheTrustBundle).
package policyreader

// +kubebuilder:rbac:groups="",resources=configmaps,verbs=list;watch
