package webhook

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	"gomodules.xyz/jsonpatch/v2"

	"github.com/kagenti/platform/injector/internal/inject"
)

// appendPatch returns the JSON Patch operations that turn the template before (raw, as in the
// request, and decoded) into after, when after is a fresh injection of before: injection only adds
// (annotations, init containers in front, containers and volumes at the end, mounts and variables
// at the end of the user's containers), so the operations follow from the lengths, without diffing
// the two documents. hasMetadata tells whether the template as sent has a metadata object. ok is false when after is not of that shape; templatePatch diffs then.
func appendPatch(prefix string, hasMetadata bool, before, after *corev1.PodTemplateSpec) (ops []jsonpatch.Operation, ok bool) {
	b, a := &before.Spec, &after.Spec
	if len(a.InitContainers) < len(b.InitContainers) || len(a.Containers) < len(b.Containers) || len(a.Volumes) < len(b.Volumes) {
		return nil, false
	}
	// At most: the annotations, each init container, two per user container, the sidecars, the volumes.
	ops = make([]jsonpatch.Operation, 0, len(after.Annotations)+len(a.InitContainers)-len(b.InitContainers)+
		2*len(b.Containers)+len(a.Containers)-len(b.Containers)+len(a.Volumes)-len(b.Volumes))
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
	case !hasMetadata:
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
			add("/spec/initContainers/"+strconv.Itoa(i), &a.InitContainers[i])
		}
	}
	// The user's init containers follow the injected ones: their rewritten probes.
	for i := range b.InitContainers {
		if !probePatch(add, "/spec/initContainers/"+strconv.Itoa(injected+i), &b.InitContainers[i], &a.InitContainers[injected+i]) {
			return nil, false
		}
	}
	// Mounts and variables at the end of the user's containers, rewritten probes; sidecars after them.
	for i := range b.Containers {
		p := "/spec/containers/" + strconv.Itoa(i)
		appendList(add, p+"/volumeMounts", b.Containers[i].VolumeMounts, a.Containers[i].VolumeMounts)
		appendList(add, p+"/env", b.Containers[i].Env, a.Containers[i].Env)
		if !probePatch(add, p, &b.Containers[i], &a.Containers[i]) {
			return nil, false
		}
	}
	appendList(add, "/spec/containers", b.Containers, a.Containers)
	appendList(add, "/spec/volumes", b.Volumes, a.Volumes)
	return ops, true
}

// probePatch replaces each probe of a user container that injection rewrote (inject's probe
// rewrite replaces the handler, the other probes are equal copies); false when a probe went
// away, which no injection does.
func probePatch(add func(string, any), path string, before, after *corev1.Container) bool {
	for _, p := range []struct {
		field         string
		before, after *corev1.Probe
	}{
		{"/livenessProbe", before.LivenessProbe, after.LivenessProbe},
		{"/readinessProbe", before.ReadinessProbe, after.ReadinessProbe},
		{"/startupProbe", before.StartupProbe, after.StartupProbe},
	} {
		switch {
		case p.before == p.after || (p.before != nil && p.after != nil && equality.Semantic.DeepEqual(p.before, p.after)):
		case p.after == nil:
			return false
		default:
			add(path+p.field, p.after) // "add" replaces an existing member (RFC 6902)
		}
	}
	return true
}

// appendList adds the elements of after beyond before's length: the whole list when before is
// absent, one "add …/-" per element otherwise.
func appendList[T any](add func(string, any), path string, before, after []T) {
	switch {
	case len(after) == len(before):
	case before == nil:
		add(path, after)
	default:
		for i := len(before); i < len(after); i++ {
			add(path+"/-", &after[i]) // a pointer: boxing the element would copy it
		}
	}
}

// escape encodes a JSON Pointer reference token (RFC 6901).
func escape(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// maxPooledPatch is the largest buffer kept for reuse: an injection's patch is a few KB.
const maxPooledPatch = 64 << 10

// patchBuffers are the buffers patches are encoded into: one per admission in flight.
var patchBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// encodePatch encodes ops as a JSON Patch document, byte for byte as encoding/json encodes the
// []jsonpatch.Operation (held by TestPatchBytes): "value" is omitted only for an operation other
// than add and replace without one. Each value is encoded once, into one buffer; a value that is an
// element (or list) of the rendering r (nil: none) is copied from r's encoding of it, which is made
// once per rendering. The document is written into dst (emptied first) and returned from there when
// dst is not nil; otherwise into a pooled buffer and returned as a copy.
func encodePatch(ops []jsonpatch.Operation, r *inject.Rendered, dst *bytes.Buffer) ([]byte, error) {
	buf := dst
	if buf == nil {
		buf = patchBuffers.Get().(*bytes.Buffer)
		defer func() {
			if buf.Cap() <= maxPooledPatch { // an unusually large patch does not stay pinned in the pool
				patchBuffers.Put(buf)
			}
		}()
	}
	buf.Reset()
	encode := jsonInto(buf)
	buf.WriteByte('[')
	for i := range ops {
		op := &ops[i]
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.WriteString(`{"op":`)
		if err := encode(op.Operation); err != nil {
			return nil, err
		}
		buf.WriteString(`,"path":`)
		if err := encode(op.Path); err != nil {
			return nil, err
		}
		if op.Value != nil || op.Operation == "add" || op.Operation == "replace" {
			buf.WriteString(`,"value":`)
			if r != nil {
				if b, ok := r.AppendEncoded(buf.AvailableBuffer(), op.Value); ok {
					buf.Write(b)
					buf.WriteByte('}')
					continue
				}
			}
			if err := encode(op.Value); err != nil {
				return nil, fmt.Errorf("encoding the value of %s %s: %w", op.Operation, op.Path, err)
			}
		}
		buf.WriteByte('}')
	}
	buf.WriteByte(']')
	if dst != nil {
		return buf.Bytes(), nil
	}
	return bytes.Clone(buf.Bytes()), nil
}

// jsonInto returns a function that appends v's JSON to buf as json.Marshal writes it (HTML
// escaped), without the newline json.Encoder ends each value with.
func jsonInto(buf *bytes.Buffer) func(v any) error {
	enc := json.NewEncoder(buf)
	return func(v any) error {
		if err := enc.Encode(v); err != nil {
			return err
		}
		buf.Truncate(buf.Len() - 1)
		return nil
	}
}
