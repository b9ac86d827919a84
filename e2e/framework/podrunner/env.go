package podrunner

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// containerEnv resolves a container's env the way the kubelet does: in order, each value expanded
// against the variables before it, references read from the Pod object and the API.
func (r *podRun) containerEnv(ctx context.Context, c *corev1.Container) (env []string, vars map[string]string, err error) {
	if len(c.EnvFrom) > 0 {
		return nil, nil, fmt.Errorf("container %s: envFrom is not supported", c.Name)
	}
	vars = map[string]string{}
	for _, e := range c.Env {
		value, set, err := r.envValue(ctx, c, e)
		if err != nil {
			return nil, nil, fmt.Errorf("container %s: env %s: %w", c.Name, e.Name, err)
		}
		if !set {
			continue
		}
		if e.ValueFrom == nil {
			value = expand(value, vars)
		}
		vars[e.Name] = value
		env = append(env, e.Name+"="+value)
	}
	return env, vars, nil
}

// envValue is one variable's value; set is false for a missing optional reference.
func (r *podRun) envValue(ctx context.Context, c *corev1.Container, e corev1.EnvVar) (value string, set bool, err error) {
	from := e.ValueFrom
	switch {
	case from == nil:
		return e.Value, true, nil // expanded by the caller against the variables before it
	case from.FieldRef != nil:
		value, err = fieldValue(r.pod, from.FieldRef.FieldPath)
		return value, err == nil, err
	case from.ResourceFieldRef != nil:
		value, err = resourceValue(r.pod, c.Name, from.ResourceFieldRef)
		return value, err == nil, err
	case from.ConfigMapKeyRef != nil:
		ref := from.ConfigMapKeyRef
		var cm corev1.ConfigMap
		err := r.k.Client.Get(ctx, client.ObjectKey{Namespace: r.pod.Namespace, Name: ref.Name}, &cm)
		data := map[string][]byte{}
		for k, v := range cm.Data {
			data[k] = []byte(v)
		}
		return keyRef("configMap", ref.Name, ref.Key, ref.Optional, data, err)
	case from.SecretKeyRef != nil:
		ref := from.SecretKeyRef
		var s corev1.Secret
		err := r.k.Client.Get(ctx, client.ObjectKey{Namespace: r.pod.Namespace, Name: ref.Name}, &s)
		return keyRef("secret", ref.Name, ref.Key, ref.Optional, s.Data, err)
	default:
		return "", false, fmt.Errorf("unsupported valueFrom")
	}
}

func keyRef(kind, name, key string, optional *bool, data map[string][]byte, getErr error) (string, bool, error) {
	opt := optional != nil && *optional
	if apierrors.IsNotFound(getErr) && opt {
		return "", false, nil
	}
	if getErr != nil {
		return "", false, fmt.Errorf("%s %s: %w", kind, name, getErr)
	}
	v, ok := data[key]
	if !ok {
		if opt {
			return "", false, nil
		}
		return "", false, fmt.Errorf("%s %s has no key %q", kind, name, key)
	}
	return string(v), true, nil
}

// fieldValue is a downward-API field of pod.
func fieldValue(pod *corev1.Pod, path string) (string, error) {
	if key, ok := subscript(path, "metadata.labels"); ok {
		return pod.Labels[key], nil
	}
	if key, ok := subscript(path, "metadata.annotations"); ok {
		return pod.Annotations[key], nil
	}
	switch path {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "metadata.labels":
		return formatMap(pod.Labels), nil
	case "metadata.annotations":
		return formatMap(pod.Annotations), nil
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.podIP":
		return pod.Status.PodIP, nil
	case "status.hostIP":
		return pod.Status.HostIP, nil
	}
	return "", fmt.Errorf("fieldPath %q is not supported", path)
}

// subscript parses "prefix['key']".
func subscript(path, prefix string) (string, bool) {
	rest, ok := strings.CutPrefix(path, prefix+"['")
	if !ok || !strings.HasSuffix(rest, "']") {
		return "", false
	}
	return strings.TrimSuffix(rest, "']"), true
}

// formatMap is the downward API's format of labels and annotations: key="value" lines, sorted.
func formatMap(m map[string]string) string {
	lines := make([]string, 0, len(m))
	for k, v := range m {
		lines = append(lines, fmt.Sprintf("%s=%q", k, v))
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// resourceValue is a container's request or limit divided by the divisor, rounded up. An unset
// limit would be the node's allocatable for the kubelet; the runner refuses it.
func resourceValue(pod *corev1.Pod, container string, ref *corev1.ResourceFieldSelector) (string, error) {
	if ref.ContainerName != "" {
		container = ref.ContainerName
	}
	c := findContainer(pod, container)
	if c == nil {
		return "", fmt.Errorf("resourceFieldRef: no container %q", container)
	}
	kind, name, ok := strings.Cut(ref.Resource, ".")
	if !ok {
		return "", fmt.Errorf("resourceFieldRef: resource %q is not supported", ref.Resource)
	}
	list := c.Resources.Limits
	if kind == "requests" {
		list = c.Resources.Requests
	}
	q, ok := list[corev1.ResourceName(name)]
	if !ok {
		return "", fmt.Errorf("resourceFieldRef %s of container %s is unset (the kubelet's node-allocatable fallback is not supported)", ref.Resource, container)
	}
	divisor := resource.MustParse("1")
	if !ref.Divisor.IsZero() {
		divisor = ref.Divisor
	}
	units := (q.MilliValue() + divisor.MilliValue() - 1) / divisor.MilliValue()
	return fmt.Sprint(units), nil
}

func findContainer(pod *corev1.Pod, name string) *corev1.Container {
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			if list[i].Name == name {
				return &list[i]
			}
		}
	}
	return nil
}

// expand is the kubelet's $(VAR) expansion of env values, command and args: a defined variable
// is replaced, an undefined reference stays as written, and $$ is a literal $.
func expand(s string, vars map[string]string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString(s[i:])
				return b.String()
			}
			name := s[i+2 : i+2+end]
			if v, ok := vars[name]; ok {
				b.WriteString(v)
			} else {
				b.WriteString(s[i : i+3+end])
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}
