package controller

import (
	"github.com/kagenti/platform/agentcard/internal/resources"
)

// servedPod pairs a ready pod with its sync state.
type servedPod struct {
	pod   *pod
	state *podState
}

// results are the sync results the status is built from (resources.BuildStatus).
func results(served []servedPod) []resources.PodResult {
	out := make([]resources.PodResult, len(served))
	for i, sp := range served {
		s := sp.state
		out[i] = resources.PodResult{
			PodName: sp.pod.Name, PodIP: sp.pod.IP, URL: s.url, FetchStatus: s.fetchStatus, Reason: s.reason, Error: s.errMsg,
			Verify: s.verify, Binding: s.binding, ChangedAt: s.changedAt, CreatedAt: s.createdAt,
		}
		if c := s.card; c != nil {
			out[i].Card = &resources.Card{Hash: c.hash, Name: c.name, Version: c.version, Status: c.status}
		}
	}
	return out
}
