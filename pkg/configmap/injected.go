package configmap

import (
	"encoding/json"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/kagenti/platform/pkg/configmap/contract"
)

// Injected are the parts of a pod template the injector added.
type Injected struct {
	InitContainers, Containers []corev1.Container
	Volumes                    []corev1.Volume
}

// InjectedParts returns what the injector added to t, as its status annotation
// (contract.InjectionStatusAnnotation) records it: a v1 status lists the names; a v2, v3 or v4 status lists
// only the names of its version's lists (contract.InjectedComponents for v2, contract.InjectedContainers since v3,
// contract.InjectedVolumes) that the template had of its own (kept), so the injected parts are the
// template's containers and volumes with one of those names that is not kept. A template without a
// status, or with one that does not parse, has none.
func InjectedParts(t *corev1.PodTemplateSpec) Injected {
	var st struct {
		Version        string   `json:"version"`
		Kept           []string `json:"kept"`
		InitContainers []string `json:"initContainers"`
		Containers     []string `json:"containers"`
		Volumes        []string `json:"volumes"`
	}
	raw, ok := t.Annotations[contract.InjectionStatusAnnotation]
	if !ok || json.Unmarshal([]byte(raw), &st) != nil {
		return Injected{}
	}
	container := func(name string) bool {
		return slices.Contains(contract.InjectedContainers, name) && !slices.Contains(st.Kept, name)
	}
	volume := func(name string) bool {
		return slices.Contains(contract.InjectedVolumes, name) && !slices.Contains(st.Kept, name)
	}
	switch st.Version {
	case "v1":
		names := slices.Concat(st.InitContainers, st.Containers)
		container = func(name string) bool { return slices.Contains(names, name) }
		volume = func(name string) bool { return slices.Contains(st.Volumes, name) }
	case "v2":
		container = func(name string) bool {
			return slices.Contains(contract.InjectedComponents, name) && !slices.Contains(st.Kept, name)
		}
	}
	var in Injected
	for _, c := range t.Spec.InitContainers {
		if container(c.Name) {
			in.InitContainers = append(in.InitContainers, c)
		}
	}
	for _, c := range t.Spec.Containers {
		if container(c.Name) {
			in.Containers = append(in.Containers, c)
		}
	}
	for _, v := range t.Spec.Volumes {
		if volume(v.Name) {
			in.Volumes = append(in.Volumes, v)
		}
	}
	return in
}
