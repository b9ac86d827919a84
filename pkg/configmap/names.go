// Package configmap derives what the pillars write for a workload and read of each other's work:
// the names of the objects derived from a workload (hashed with kmeta.ChildName, so every binary
// derives the same, valid name) and the parts of a pod template the injector added. The names,
// labels, paths and ports themselves are in package contract, which imports only the standard
// library; the applier that writes these objects is in pkg/duck/kit.
package configmap

import (
	"knative.dev/pkg/kmeta"

	"github.com/kagenti/platform/pkg/configmap/contract"
)

// ChildName returns "{parent}-{suffix}", shortened with a hash when longer than 63 characters
// (kmeta.ChildName), so every binary derives the same, valid name.
func ChildName(parent, suffix string) string {
	return kmeta.ChildName(parent, "-"+suffix)
}

// TokenExchangeName is the ConfigMap written by tokenexchange and mounted by the injector.
func TokenExchangeName(workload string) string {
	return ChildName(workload, contract.SuffixTokenExchange)
}

// TraceName is the ConfigMap written by agenttrace and mounted by the injector.
func TraceName(workload string) string { return ChildName(workload, contract.SuffixTrace) }

// AgentPolicyName is the NetworkPolicy written by netpol for a workload's AgentCard.
func AgentPolicyName(workload string) string { return ChildName(workload, contract.SuffixAgentPolicy) }

// AgentCardName is the AgentCard auto-created by agentcard for a workload of the given kind,
// "{workload}-{kind}-card" with the kind lower-cased.
func AgentCardName(workload, kind string) string {
	return ChildName(workload, lower(kind)+"-"+contract.SuffixCard)
}

func lower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}
