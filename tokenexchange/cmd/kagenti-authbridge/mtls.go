package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/workloadapi"

	"github.com/kagenti/platform/tokenexchange/internal/authconfig"
)

// svidWait bounds the wait for the first X.509 SVID from the SPIRE agent at start.
const svidWait = 30 * time.Second

// svidSources holds the process's X.509 SVID source, by socket: the inbound and outbound roles
// of one process share one Workload API stream.
var svidSources = struct {
	sync.Mutex
	m map[string]*workloadapi.X509Source
}{m: map[string]*workloadapi.X509Source{}}

// svidSource opens (once per process) the Workload API X.509 source on the configuration's SPIRE
// agent socket (spiffe.socketPath) and returns it with the trust domain. It waits for the first
// SVID; the source then follows the agent's rotations for the life of the process.
func svidSource(c authconfig.Config) (*workloadapi.X509Source, spiffeid.TrustDomain, error) {
	td, err := spiffeid.TrustDomainFromString(c.Spiffe.TrustDomain)
	if err != nil {
		return nil, spiffeid.TrustDomain{}, fmt.Errorf("spiffe.trustDomain: %w", err)
	}
	svidSources.Lock()
	defer svidSources.Unlock()
	if s, ok := svidSources.m[c.Spiffe.SocketPath]; ok {
		return s, td, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), svidWait)
	defer cancel()
	s, err := workloadapi.NewX509Source(ctx, workloadapi.WithClientOptions(workloadapi.WithAddr("unix://"+c.Spiffe.SocketPath)))
	if err != nil {
		return nil, td, fmt.Errorf("mtls.mode %s: no X.509 SVID from the SPIRE agent at %s within %s (is the agent's socket mounted into this container, and the workload registered?): %w",
			c.MTLS.Mode, c.Spiffe.SocketPath, svidWait, err)
	}
	svidSources.m[c.Spiffe.SocketPath] = s
	return s, td, nil
}
