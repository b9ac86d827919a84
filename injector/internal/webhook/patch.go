package webhook

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"gomodules.xyz/jsonpatch/v2"
)

// appendPatch returns the JSON Patch operations that turn the template before (raw, as in the
// request, and decoded) into after, when after is a fresh injection of before: injection only adds
// (annotations, init containers in front, containers and volumes at the end, mounts and variables
// at the end of the user's containers), so the operations follow from the lengths, without diffing
// the two documents. ok is false when after is not of that shape; templatePatch diffs then.
func appendPatch(prefix string, raw json.RawMessage, before, after *corev1.PodTemplateSpec) (ops []jsonpatch.Operation, ok bool) {
	b, a := &before.Spec, &after.Spec
	if len(a.InitContainers) < len(b.InitContainers) || len(a.Containers) < len(b.Containers) || len(a.Volumes) < len(b.Volumes) {
		return nil, false
	}
	var hasMetadata struct {
		Metadata json.RawMessage `json:"metadata"`
	}
	if err := json.Unmarshal(raw, &hasMetadata); err != nil {
		return nil, false
	}
	add := func(path string, v any) { ops = append(ops, jsonpatch.NewOperation("add", prefix+path, v)) }

	// Annotations: the injector's keys are new in a fresh injection.
	var added []string
	for k := range after.Annotations {
		if _, had := before.Annotations[k]; !had {
			added = append(added, k)
		} else if before.Annotations[k] != after.Annotations[k] {
			return nil, false
		}
	}
	switch {
	case len(added) == 0:
	case len(hasMetadata.Metadata) == 0 || string(hasMetadata.Metadata) == "null":
		add("/metadata", map[string]any{"annotations": after.Annotations})
	case before.Annotations == nil:
		add("/metadata/annotations", after.Annotations)
	default:
		slices.Sort(added)
		for _, k := range added {
			add("/metadata/annotations/"+escape(k), after.Annotations[k])
		}
	}

	// Init containers go in front of the user's.
	injected := len(a.InitContainers) - len(b.InitContainers)
	switch {
	case injected == 0:
	case b.InitContainers == nil:
		add("/spec/initContainers", a.InitContainers)
	default:
		for i := range injected {
			add("/spec/initContainers/"+strconv.Itoa(i), a.InitContainers[i])
		}
	}
	// Mounts and variables at the end of the user's containers; sidecars after them.
	for i := range b.Containers {
		p := "/spec/containers/" + strconv.Itoa(i)
		appendList(add, p+"/volumeMounts", b.Containers[i].VolumeMounts, a.Containers[i].VolumeMounts)
		appendList(add, p+"/env", b.Containers[i].Env, a.Containers[i].Env)
	}
	appendList(add, "/spec/containers", b.Containers, a.Containers)
	appendList(add, "/spec/volumes", b.Volumes, a.Volumes)
	return ops, true
}

// appendList adds the elements of after beyond before's length: the whole list when before is
// absent, one "add …/-" per element otherwise.
func appendList[T any](add func(string, any), path string, before, after []T) {
	switch {
	case len(after) == len(before):
	case before == nil:
		add(path, after)
	default:
		for _, v := range after[len(before):] {
			add(path+"/-", v)
		}
	}
}

// escape encodes a JSON Pointer reference token (RFC 6901).
func escape(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}
