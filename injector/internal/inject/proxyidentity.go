package inject

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
)

// ProxyIdentityError is a user container that would run as the proxy UID, or in its group (the
// injected containers' runAsGroup is the same number). Field is the offending field's path in the
// pod template, e.g. spec.containers[1].securityContext.runAsUser.
type ProxyIdentityError struct {
	Field string
	Value int64
	// Who says which user container runs with the value, and how, e.g.
	// `container "agent", which sets no runAsUser of its own,`.
	Who   string
	Group bool
}

func (e *ProxyIdentityError) Error() string {
	if !e.Group {
		return fmt.Sprintf("%s: invalid value %d: %s would run as the proxy UID (identity.proxyUID of the injector configuration): "+
			"the traffic interception lets that UID's connections through unredirected, so its calls would skip envoy-proxy "+
			"(no token exchange: they would carry the original token) and it could read the identity sidecars' files; "+
			"run it as another UID", e.Field, e.Value, e.Who)
	}
	return fmt.Sprintf("%s: invalid value %d: %s would run in the proxy group (identity.proxyUID of the injector configuration, "+
		"the identity sidecars' runAsGroup), which reads the workload's client secret and JWT-SVID (mode 0640 in the shared volume); "+
		"use another group", e.Field, e.Value, e.Who)
}

// checkProxyIdentity returns a *ProxyIdentityError for the first user container, init containers
// first, whose effective UID or one of whose groups is r.ProxyUID. The interception rules exempt
// that UID (docs/architecture.md §5), and the credentials the identity sidecars share are readable by
// its group: an agent running with either would bypass the outbound proxy or hold the credentials
// the proxy exists to keep from it. Containers named after a component (injected, or the user's own
// version of one) are exempt, as for ports, and so are those old (the template's status, may be nil)
// says an earlier injection added (a v2 template's client-registration runs as the proxy UID too).
// The paths name the template as it came, before the old injection is stripped.
//
// Only what the template says is seen: a container that sets no runAsUser (and whose pod sets none)
// runs as its image's USER, which the webhook cannot read (docs/injector.md).
func checkProxyIdentity(t *corev1.PodTemplateSpec, r *Rendered, old *Status) error {
	id := r.ProxyUID
	if id == 0 {
		return nil
	}
	pod := t.Spec.SecurityContext
	if pod == nil {
		pod = &corev1.PodSecurityContext{}
	}
	for _, list := range []struct {
		field      string
		containers []corev1.Container
	}{{"spec.initContainers", t.Spec.InitContainers}, {"spec.containers", t.Spec.Containers}} {
		for i, c := range list.containers {
			if r.isComponent(c.Name) || old.injectedContainer(c.Name) {
				continue
			}
			path := fmt.Sprintf("%s[%d]", list.field, i)
			who := fmt.Sprintf("%q", c.Name)
			sc := c.SecurityContext
			if sc == nil {
				sc = &corev1.SecurityContext{}
			}
			for _, f := range []struct {
				name       string
				own, inPod *int64
				group      bool
			}{{"runAsUser", sc.RunAsUser, pod.RunAsUser, false}, {"runAsGroup", sc.RunAsGroup, pod.RunAsGroup, true}} {
				switch {
				case f.own != nil && *f.own == id:
					return &ProxyIdentityError{Field: path + ".securityContext." + f.name, Value: id, Who: "container " + who, Group: f.group}
				case f.own == nil && f.inPod != nil && *f.inPod == id:
					return &ProxyIdentityError{Field: "spec.securityContext." + f.name, Value: id,
						Who: fmt.Sprintf("container %s, which sets no %s of its own,", who, f.name), Group: f.group}
				}
			}
			// Every container of the pod joins these groups, the user's included.
			for k, g := range pod.SupplementalGroups {
				if g == id {
					return &ProxyIdentityError{Field: fmt.Sprintf("spec.securityContext.supplementalGroups[%d]", k), Value: id,
						Who: "every container of the pod, container " + who + " included,", Group: true}
				}
			}
			if pod.FSGroup != nil && *pod.FSGroup == id {
				return &ProxyIdentityError{Field: "spec.securityContext.fsGroup", Value: id,
					Who: "every container of the pod, container " + who + " included,", Group: true}
			}
		}
	}
	return nil
}
