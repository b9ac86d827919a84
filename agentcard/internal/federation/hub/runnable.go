package hub

import (
	"context"
	"fmt"
	"net"

	"github.com/kagenti/platform/agentcard/internal/federation/tlsid"
)

// Server runs the hub's gRPC endpoint on the leader: only one replica holds the member streams and
// the catalogue they feed, so two replicas behind one Service never disagree about a member.
type Server struct {
	Hub     *Hub
	Address string
	// Identity gives the hub's own SVID; the members' bundles come from the registry.
	Identity func(context.Context) (tlsid.Sources, error)
}

// NeedLeaderElection: members stream to the leader; a follower does not listen, so a member that
// reached it reconnects until it reaches the leader.
func (s *Server) NeedLeaderElection() bool { return true }

// Start serves until ctx ends.
func (s *Server) Start(ctx context.Context) error {
	src, err := s.Identity(ctx)
	if err != nil {
		return err
	}
	defer src.Close()
	select {
	case <-s.Hub.Registry.Ready():
	case <-ctx.Done():
		return nil
	}
	ln, err := net.Listen("tcp", s.Address)
	if err != nil {
		return fmt.Errorf("federation endpoint: %w", err)
	}
	srv := s.Hub.NewGRPCServer(tlsid.ServerConfig(src.SVID, s.Hub.Registry, s.Hub.RejectedCertificate))
	s.Hub.Store.SetServing(true)
	defer s.Hub.Store.SetServing(false)
	go func() {
		<-ctx.Done()
		srv.Stop()
	}()
	s.Hub.Log.Info("federation hub listening (gRPC, mutual TLS)", "address", ln.Addr().String())
	return srv.Serve(ln)
}
