// Package contract is what every Kagenti binary must agree on, written down once: the names of what
// the injector adds to a pod (containers, volumes, mount paths, files), the ports the data plane
// listens on, the kagenti-authbridge roles, the labels and annotations on the objects the pillars
// derive, the suffixes of their names, and the identity-defaults line of the agent's original
// probes (docs/architecture.md §4 to §6).
//
// It imports only the standard library (TestContractIsStandardLibraryOnly), because
// kagenti-authbridge, the sidecar in every agent pod, imports it: a constant it shares with the
// injector must not bring the controller libraries (controller-runtime, client-go, kmeta) into
// every pod. What needs Kubernetes' packages lives beside it: pkg/configmap (the derived object
// names, hashed with kmeta.ChildName; the injected parts of a pod template),
// pkg/configmap/appprobe (the probes, in the kubelet's types), pkg/duck/kit (the applier).
//
// A name here is read by a program other than its writer's: changing one is a change of the
// contract between binaries of different releases (an injection status version, a ConfigMap a
// running sidecar reads), not a refactoring.
package contract
