package inject

import (
	"encoding/json"

	corev1 "k8s.io/api/core/v1"
)

// encoded holds the JSON encoding of each rendered element, index for index with the lists of a
// Rendered. A cached rendering serves every admission with the same configuration and options, and
// a fresh injection's patch carries these elements verbatim: they are encoded once per rendering
// instead of once per admission.
type encoded struct {
	initContainers, containers, volumes, userMounts [][]byte
}

// encodeAll encodes every element of r, as encoding/json encodes it. An element that fails to
// encode (none can: they are plain API types) is left nil and encoded per admission instead.
func (r *Rendered) encodeAll() {
	r.encoded = encoded{
		initContainers: encodeEach(r.InitContainers),
		containers:     encodeEach(r.Containers),
		volumes:        encodeEach(r.Volumes),
		userMounts:     encodeEach(r.UserMounts),
	}
}

func encodeEach[T any](items []T) [][]byte {
	out := make([][]byte, len(items))
	for i := range items {
		out[i], _ = json.Marshal(&items[i])
	}
	return out
}

// AppendEncoded appends to dst the JSON encoding of v, byte for byte what encoding/json writes for
// it, when v is one of r's rendered containers (init or not), volumes or user mounts, or a
// pointer to one, or a slice of them: the very element Inject added (the same
// slices and pointers, not only the same name). Otherwise it returns dst unchanged and false, and
// the caller encodes v itself.
func (r *Rendered) AppendEncoded(dst []byte, v any) ([]byte, bool) {
	switch v := v.(type) {
	case *corev1.Container:
		return appendOne(dst, r.containerJSON(v))
	case []corev1.Container:
		return appendList(dst, v, r.containerJSON)
	case *corev1.Volume:
		return appendOne(dst, lookup(r.Volumes, r.encoded.volumes, v))
	case []corev1.Volume:
		return appendList(dst, v, func(e *corev1.Volume) []byte { return lookup(r.Volumes, r.encoded.volumes, e) })
	case *corev1.VolumeMount:
		return appendOne(dst, lookupFunc(r.UserMounts, r.encoded.userMounts, v, sameMount))
	case []corev1.VolumeMount:
		return appendList(dst, v, func(e *corev1.VolumeMount) []byte {
			return lookupFunc(r.UserMounts, r.encoded.userMounts, e, sameMount)
		})
	}
	return dst, false
}

func appendOne(dst, b []byte) ([]byte, bool) {
	if b == nil {
		return dst, false
	}
	return append(dst, b...), true
}

// appendList appends the JSON array of items when each of them has an encoding; a nil slice is
// left to the caller (encoding/json writes null for it).
func appendList[T any](dst []byte, items []T, encodingOf func(*T) []byte) ([]byte, bool) {
	if items == nil {
		return dst, false
	}
	start := len(dst)
	dst = append(dst, '[')
	for i := range items {
		b := encodingOf(&items[i])
		if b == nil {
			return dst[:start], false
		}
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, b...)
	}
	return append(dst, ']'), true
}

// lookup returns the encoding of the element of rendered equal to v. Volumes are
// comparable structs whose pointers Inject shares with the rendering, so == holds only for the
// rendered element itself (or one with the very same pointers, or none where it has none).
func lookup[T comparable](rendered []T, encodings [][]byte, v *T) []byte {
	return lookupFunc(rendered, encodings, v, func(a, b *T) bool { return *a == *b })
}

func lookupFunc[T any](rendered []T, encodings [][]byte, v *T, equal func(a, b *T) bool) []byte {
	for i := range rendered {
		if equal(&rendered[i], v) && i < len(encodings) {
			return encodings[i]
		}
	}
	return nil
}

// sameMount is == for mounts without bind mount options (the rendered ones have none).
func sameMount(a, b *corev1.VolumeMount) bool {
	return len(a.BindMountOptions) == 0 && len(b.BindMountOptions) == 0 &&
		a.Name == b.Name && a.ReadOnly == b.ReadOnly && a.RecursiveReadOnly == b.RecursiveReadOnly && a.MountPath == b.MountPath &&
		a.SubPath == b.SubPath && a.MountPropagation == b.MountPropagation && a.SubPathExpr == b.SubPathExpr
}

// containerJSON returns the encoding of the rendered container c is: same name, and the same
// backing arrays of its mounts and arguments (Inject shares them with the rendering), so a user's
// container of the same name never matches.
func (r *Rendered) containerJSON(c *corev1.Container) []byte {
	for _, l := range []struct {
		rendered  []corev1.Container
		encodings [][]byte
	}{{r.InitContainers, r.encoded.initContainers}, {r.Containers, r.encoded.containers}} {
		for i := range l.rendered {
			if rc := &l.rendered[i]; rc.Name == c.Name && rc.Image == c.Image && sameBacking(rc.VolumeMounts, c.VolumeMounts) && sameBacking(rc.Args, c.Args) && i < len(l.encodings) {
				return l.encodings[i]
			}
		}
	}
	return nil
}

// sameBacking reports whether a and b are the same non-empty slice (same array, same length).
func sameBacking[T any](a, b []T) bool {
	return len(a) > 0 && len(a) == len(b) && &a[0] == &b[0]
}
