// Package deploy holds no code: its tests install the shipped manifests (the kustomize overlays and
// the helm chart) on a real API server and check, as each binary's own ServiceAccount, that the
// RBAC they carry grants what the binary needs and nothing it must not have (docs/security.md).
package deploy
