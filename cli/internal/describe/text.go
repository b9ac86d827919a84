package describe

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/kagenti/platform/cli/internal/kube"
)

// WriteText prints the report in one screen, the way `make run` summarises the sample.
func (r *Report) WriteText(out io.Writer) error {
	var b strings.Builder
	w := r.Workload
	fmt.Fprintf(&b, "%s %s/%s: %s\n", w.Kind, w.Namespace, w.Name, w.Ready)
	if len(w.Labels) > 0 {
		var ls []string
		for _, k := range sortedKeys(w.Labels) {
			ls = append(ls, k+"="+w.Labels[k])
		}
		fmt.Fprintf(&b, "  labels: %s\n", strings.Join(ls, " "))
	}

	fmt.Fprintln(&b)
	if r.Injection.Injected {
		version, _ := r.Injection.Status["version"].(string)
		hash, _ := r.Injection.Status["hash"].(string)
		fmt.Fprintf(&b, "Injection: injected (%s %s, hash %s)\n", AnnotationInjectionStatus, version, hash)
		fmt.Fprintf(&b, "  components: %s\n", orNone(strings.Join(r.Injection.Components, ", ")))
		if combined := combinedContainers(r.Injection.Containers); combined != "" {
			fmt.Fprintf(&b, "  %s\n", combined)
		}
		fmt.Fprintf(&b, "  pods: %d of %d run the injected template\n", r.Injection.PodsInjected, len(r.Pods))
	} else {
		fmt.Fprintf(&b, "Injection: not injected\n")
		for _, why := range r.Injection.NotInjectedBecause {
			fmt.Fprintf(&b, "  - %s\n", why)
		}
		if r.Injection.PodsInjected > 0 {
			fmt.Fprintf(&b, "  %d of %d pods still run an injected template from before\n", r.Injection.PodsInjected, len(r.Pods))
		}
	}

	fmt.Fprintf(&b, "\nPods:\n")
	if len(r.Pods) == 0 {
		fmt.Fprintf(&b, "  (none)\n")
	}
	for _, p := range r.Pods {
		ready := "not ready"
		if p.Ready {
			ready = "ready"
		}
		line := fmt.Sprintf("  %s  %s, %s, %d restarts", p.Name, p.Phase, ready, p.Restarts)
		if p.Injected {
			line += ", injected"
		}
		if p.SignatureVerified != "" {
			line += ", " + LabelSignatureVerified + "=" + p.SignatureVerified
		}
		fmt.Fprintln(&b, line)
	}

	fmt.Fprintf(&b, "\nKagenti resources targeting it:\n")
	if len(r.Resources) == 0 {
		fmt.Fprintf(&b, "  (none)\n")
	}
	for _, res := range r.Resources {
		line := fmt.Sprintf("  %s %s", res.Kind, res.Name)
		if res.Phase != "" {
			line += ": " + res.Phase
		}
		fmt.Fprintln(&b, line)
		if ready := kube.FindCondition(res.Conditions, "Ready"); ready != nil {
			fmt.Fprintf(&b, "    %s\n", conditionLine(*ready, true))
		} else {
			fmt.Fprintf(&b, "    Ready: not reported yet\n")
		}
		// By type: the order in status depends on which controller wrote first (netpol or agentcard).
		var others []string
		for _, c := range res.Conditions {
			if c.Type != "Ready" {
				others = append(others, conditionLine(c, false))
			}
		}
		sort.Strings(others)
		if len(others) > 0 {
			fmt.Fprintf(&b, "    %s\n", strings.Join(others, ", "))
		}
		if res.Stale {
			fmt.Fprintf(&b, "    (status describes an older generation: the controller has not caught up)\n")
		}
	}

	fmt.Fprintf(&b, "\nConfigMaps:\n")
	for _, cm := range r.ConfigMaps {
		fmt.Fprintf(&b, "  %s (%s): %s\n", cm.Name, cm.Writer, r.configMapLine(cm))
	}

	for _, c := range r.AgentCards {
		fmt.Fprintf(&b, "\nAgentCard %s: ", c.Name)
		if c.Ready != nil {
			fmt.Fprintf(&b, "%s\n", conditionLine(*c.Ready, true))
		} else {
			fmt.Fprintf(&b, "Ready not reported yet\n")
		}
		agent := "no card fetched yet"
		if c.Agent != "" {
			agent = fmt.Sprintf("agent %q %s", c.Agent, c.Version)
		}
		sig := "signature not verified"
		if c.Verified {
			sig = "signature verified (" + c.SpiffeID + ")"
		} else if c.SignatureReason != "" {
			sig += " (" + c.SignatureReason + ")"
		}
		bound := "identity not bound"
		if c.Bound {
			bound = "bound to " + c.ExpectedSpiffeID
		} else if c.BindingReason != "" {
			bound += " (" + c.BindingReason + ")"
		}
		fmt.Fprintf(&b, "  %s, %d pod(s), %s, %s\n", agent, c.DiscoveredPods, sig, bound)
		if len(c.Skills) > 0 {
			fmt.Fprintf(&b, "  skills: %s\n", strings.Join(c.Skills, ", "))
		}
		if c.Exported {
			exported := "exported to the federation hub (" + LabelExport + "=true): a member streams it once Verified is True"
			if !c.Verified || !c.Bound {
				exported = "labelled " + LabelExport + "=true, but not verified and bound: the federation hub does not get it"
			}
			fmt.Fprintf(&b, "  %s\n", exported)
		}
	}
	if len(r.AgentCards) == 0 {
		fmt.Fprintf(&b, "\nAgentCard: none (label the workload %s=agent to have one created)\n", LabelType)
	}
	for _, p := range r.NetworkPolicy {
		if !p.Exists {
			fmt.Fprintf(&b, "NetworkPolicy %s: not written (is netpol running? kagenti check)\n", p.Name)
			continue
		}
		fmt.Fprintf(&b, "NetworkPolicy %s: %s: %s\n", p.Name, p.Kind, p.Verification)
	}
	if r.Build != nil {
		line := fmt.Sprintf("AgentBuild %s: phase %s", r.Build.Name, orNone(r.Build.Phase))
		if r.Build.Ready != nil {
			line += ", " + conditionLine(*r.Build.Ready, false)
		}
		if r.Build.Image != "" {
			line += ", built " + r.Build.Image
		} else {
			line += ", no image built yet"
		}
		fmt.Fprintf(&b, "\n%s\n", line)
	}
	r.writeAuthorization(&b)
	_, err := io.WriteString(out, b.String())
	return err
}

func (r *Report) configMapLine(cm ConfigMap) string {
	mounted := fmt.Sprintf("mounted by %d of %d pods", cm.MountedBy, cm.Pods)
	if !cm.Exists {
		return fmt.Sprintf("not written (no %s targets the workload); %s, which use the defaults", writerKind(cm.Writer), mounted)
	}
	written := "written"
	if t, err := time.Parse(time.RFC3339, cm.Written); err == nil {
		written += " " + duration.HumanDuration(r.now.Sub(t)) + " ago"
	}
	if cm.Owner != "" {
		written += " by " + cm.Owner
	}
	if cm.ContentHash != "" {
		written += ", content " + cm.ContentHash
	}
	switch {
	case cm.MountedBy == 0:
		return written + "; no pod mounts it (the pods are not injected)"
	case cm.Current:
		return written + "; " + mounted + ", which run its current content"
	default:
		return written + "; " + mounted + ": kubelet delivers the change within about a minute"
	}
}

func writerKind(pillar string) string {
	switch pillar {
	case "tokenexchange":
		return "TokenExchange"
	case "agenttrace":
		return "AgentTrace"
	}
	return pillar
}

func conditionLine(c kube.Condition, withMessage bool) string {
	s := c.Type + "=" + c.Status
	if c.Reason != "" {
		s += " (" + c.Reason + ")"
	}
	if withMessage && c.Status != "True" && c.Message != "" {
		s += ": " + c.Message
	}
	return s
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// combinedContainers names the injected containers that run several components, e.g. "container
// authbridge runs client-registration, auth-proxy, envoy-proxy", "" when there is none.
func combinedContainers(cs []InjectedContainer) string {
	var lines []string
	for _, c := range cs {
		if len(c.Components) > 1 || (len(c.Components) == 1 && c.Components[0] != c.Name) {
			lines = append(lines, fmt.Sprintf("container %s runs %s", c.Name, strings.Join(c.Components, ", ")))
		}
	}
	return strings.Join(lines, "; ")
}
