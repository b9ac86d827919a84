package hub

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/svid/x509svid"
	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/kagenti/platform/agentcard/api/v1alpha1"
	"github.com/kagenti/platform/agentcard/internal/federation/wire"
)

// Limits of one member's stream.
const (
	// DefaultMaxFrameBytes admits the largest card (MaxCardBytes) with room for the frame around it.
	DefaultMaxFrameBytes = MaxCardBytes + 16<<10
	// DefaultFrameRate and DefaultFrameBurst bound the frames a member may send: a full resync of
	// DefaultMaxCards cards fits in the burst.
	DefaultFrameRate  = 500
	DefaultFrameBurst = 2*DefaultMaxCards + 16
)

// Hub serves the federation stream.
type Hub struct {
	Registry *Registry
	Store    *Store
	Log      logr.Logger
	// FrameRate and FrameBurst are each member's frame budget (DefaultFrameRate/Burst when 0).
	FrameRate  float64
	FrameBurst int
	// MaxFrameBytes is the largest frame (DefaultMaxFrameBytes when 0).
	MaxFrameBytes int

	// Accepted counts the streams that passed authentication (tests read it).
	Accepted atomic.Int64

	mu       sync.Mutex
	active   map[string]*activeStream
	limiters map[string]*rate.Limiter
}

type activeStream struct{ cancel context.CancelCauseFunc }

// streamError ends a stream with a reason recorded on the member's FederatedCluster.
type streamError struct {
	code            codes.Code
	reason, message string
}

func (e *streamError) Error() string { return e.reason + ": " + e.message }

func endStream(code codes.Code, reason, format string, args ...any) *streamError {
	return &streamError{code: code, reason: reason, message: fmt.Sprintf(format, args...)}
}

// NewGRPCServer returns a gRPC server for h over mutual TLS (tlsid.ServerConfig).
func (h *Hub) NewGRPCServer(cfg *tls.Config) *grpc.Server {
	s := grpc.NewServer(
		grpc.Creds(credentials.NewTLS(cfg)),
		grpc.ForceServerCodec(wire.Codec{}),
		grpc.MaxRecvMsgSize(h.maxFrame()),
		grpc.MaxConcurrentStreams(4),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
	)
	s.RegisterService(&wire.ServiceDesc, h)
	return s
}

func (h *Hub) maxFrame() int {
	if h.MaxFrameBytes > 0 {
		return h.MaxFrameBytes
	}
	return DefaultMaxFrameBytes
}

// RejectedCertificate records a refused handshake on the FederatedCluster of the trust domain
// the certificate claims (when one is registered): expired, or not chaining to its bundle.
func (h *Hub) RejectedCertificate(leaf *x509.Certificate, err error) {
	if leaf == nil || len(leaf.URIs) != 1 {
		h.Log.V(1).Info("refused a handshake without a SPIFFE certificate", "error", err.Error())
		return
	}
	id, perr := spiffeid.FromURI(leaf.URIs[0])
	if perr != nil {
		return
	}
	reg, ok := h.Registry.ByTrustDomain(id.TrustDomain())
	if !ok {
		h.Log.Info("refused a member of an unregistered trust domain", "spiffeID", id.String(), "error", err.Error())
		return
	}
	now := h.Store.Clock.Now()
	reason := v1alpha1.ReasonUntrustedCertificate
	if now.After(leaf.NotAfter) || now.Before(leaf.NotBefore) {
		reason = v1alpha1.ReasonCertificateExpired
	}
	h.Store.Refuse(reg.Name, reason, fmt.Sprintf("the certificate of %s (valid %s to %s) was refused: %v",
		id, leaf.NotBefore.UTC().Format(time.RFC3339), leaf.NotAfter.UTC().Format(time.RFC3339), err))
}

// Stream implements wire.Handler: one member's stream, from its Hello to its end.
func (h *Hub) Stream(ss grpc.ServerStream) error {
	leaf, id, err := peerSVID(ss.Context())
	if err != nil {
		return status.Error(codes.Unauthenticated, err.Error())
	}
	reg, ok := h.Registry.ByTrustDomain(id.TrustDomain())
	if !ok {
		return status.Errorf(codes.PermissionDenied, "trust domain %q is not registered by any FederatedCluster", id.TrustDomain().Name())
	}
	var hello wire.MemberFrame
	if err := ss.RecvMsg(&hello); err != nil {
		se := classifyRecv(err)
		h.Store.Refuse(reg.Name, se.reason, se.message)
		return status.Error(se.code, se.Error())
	}
	if se := h.admit(reg, id, &hello); se != nil {
		h.Store.Refuse(reg.Name, se.reason, se.message)
		return status.Error(se.code, se.Error())
	}
	ctx, cancel := context.WithCancelCause(ss.Context())
	defer cancel(nil)
	defer h.release(reg.Name, h.supersede(reg.Name, cancel))
	h.Accepted.Add(1)

	resume := h.Store.Open(reg.Name, hello.Hello.Epoch, id.String(), hello.Hello.ClusterID)
	if err := ss.SendMsg(&wire.HubFrame{Welcome: &wire.Welcome{ResumeFrom: resume, HeartbeatMillis: (reg.TTL / 3).Milliseconds()}}); err != nil {
		h.Store.Close(reg.Name, v1alpha1.ReasonDisconnected, "sending the welcome: "+err.Error())
		return err
	}
	// The stream was authenticated with leaf; it ends when leaf expires (the member reconnects
	// with its rotated certificate and resumes).
	expiry := time.AfterFunc(leaf.NotAfter.Sub(time.Now()), func() {
		cancel(endStream(codes.Unauthenticated, v1alpha1.ReasonCertificateExpired, "the certificate of %s the stream was opened with expired at %s", id, leaf.NotAfter.UTC().Format(time.RFC3339)))
	})
	defer expiry.Stop()

	se := h.serve(ctx, ss, reg.Name)
	if cause := context.Cause(ctx); se == nil && cause != nil && !errors.Is(cause, context.Canceled) {
		if c, ok := cause.(*streamError); ok {
			se = c
		}
	}
	if se == nil {
		se = endStream(codes.OK, v1alpha1.ReasonDisconnected, "the member closed its stream")
	}
	h.Store.Close(reg.Name, se.reason, se.message)
	if se.code == codes.OK {
		return nil
	}
	return status.Error(se.code, se.Error())
}

// admit checks the Hello against the registration of the peer's trust domain.
func (h *Hub) admit(reg Registration, id spiffeid.ID, f *wire.MemberFrame) *streamError {
	if err := f.Validate(); err != nil || f.Hello == nil {
		msg := "the first frame must be a hello"
		if err != nil {
			msg = err.Error()
		}
		return endStream(codes.InvalidArgument, v1alpha1.ReasonMalformedFrame, "%s", msg)
	}
	if f.Hello.Version != wire.ProtocolVersion {
		return endStream(codes.FailedPrecondition, v1alpha1.ReasonMalformedFrame, "protocol version %d; this hub speaks %d", f.Hello.Version, wire.ProtocolVersion)
	}
	if id != reg.AgentID {
		return endStream(codes.PermissionDenied, v1alpha1.ReasonUnknownCluster, "%s is not the member agent identity %s of FederatedCluster %s (spec.agentSpiffeID)", id, reg.AgentID, reg.Name)
	}
	if f.Hello.Cluster != reg.Name {
		return endStream(codes.PermissionDenied, v1alpha1.ReasonUnknownCluster, "the member named itself %q, but its trust domain %q is registered as FederatedCluster %s", f.Hello.Cluster, reg.TrustDomain.Name(), reg.Name)
	}
	if f.Hello.ClusterID != "" && f.Hello.ClusterID != reg.Name {
		return endStream(codes.PermissionDenied, v1alpha1.ReasonClusterIDMismatch, "the member's About API ClusterProperty %s is %q; register it under that name", v1alpha1.ClusterPropertyClusterID, f.Hello.ClusterID)
	}
	return nil
}

// serve applies the member's frames until the stream ends; the result says why it ended (nil: the
// member closed it or the hub is stopping).
func (h *Hub) serve(ctx context.Context, ss grpc.ServerStream, name string) *streamError {
	frames := make(chan *wire.MemberFrame, 64)
	recvDone := make(chan struct{})
	var recvErr error // written before recvDone is closed
	go func() {
		defer close(recvDone)
		for {
			f := &wire.MemberFrame{}
			if err := ss.RecvMsg(f); err != nil {
				recvErr = err
				return
			}
			select {
			case frames <- f:
			case <-ctx.Done():
				return
			}
		}
	}()
	limiter := h.limiter(name)
	for {
		select {
		case <-ctx.Done():
			if _, ours := context.Cause(ctx).(*streamError); ours {
				return nil // the caller reports the cause
			}
			// The stream itself ended; a failed receive (a frame too large or malformed) cancels it
			// too, so report the receive's error rather than the cancel.
			<-recvDone
			if recvErr != nil {
				return recvEnded(recvErr)
			}
			return nil
		case <-recvDone:
			// Apply what was received before the end (a member's last flush before it closed).
			for len(frames) > 0 {
				if se := h.frame(ss, name, limiter, <-frames); se != nil {
					return se
				}
			}
			if recvErr != nil {
				return recvEnded(recvErr)
			}
			return nil
		case f := <-frames:
			if se := h.frame(ss, name, limiter, f); se != nil {
				return se
			}
		}
	}
}

// frame applies one frame within the member's budget and registration.
func (h *Hub) frame(ss grpc.ServerStream, name string, limiter *rate.Limiter, f *wire.MemberFrame) *streamError {
	if !limiter.Allow() {
		return endStream(codes.ResourceExhausted, v1alpha1.ReasonRateLimited, "more than %v frames a second (burst %d); reconnect later", limiter.Limit(), limiter.Burst())
	}
	reg, ok := h.Registry.Get(name)
	if !ok || !reg.Usable() {
		return endStream(codes.PermissionDenied, v1alpha1.ReasonUnknownCluster, "FederatedCluster %s was deleted or became unusable", name)
	}
	return h.apply(ss, reg, f)
}

func (h *Hub) apply(ss grpc.ServerStream, reg Registration, f *wire.MemberFrame) *streamError {
	if err := f.Validate(); err != nil {
		return endStream(codes.InvalidArgument, v1alpha1.ReasonMalformedFrame, "%v", err)
	}
	switch {
	case f.Hello != nil:
		return endStream(codes.InvalidArgument, v1alpha1.ReasonMalformedFrame, "a second hello on one stream")
	case f.Upsert != nil:
		if r := h.Store.Upsert(reg, f.Upsert); r != nil {
			h.Log.V(1).Info("refused a card", "cluster", reg.Name, "namespace", f.Upsert.Namespace, "name", f.Upsert.Name, "reason", r.Reason, "message", r.Message)
		}
	case f.Delete != nil:
		h.Store.Delete(reg.Name, f.Delete)
	case f.Flush != nil:
		refused := h.Store.Flush(reg.Name, f.Flush)
		if err := ss.SendMsg(&wire.HubFrame{Ack: &wire.Ack{Revision: f.Flush.Revision, Refused: refused}}); err != nil {
			return endStream(codes.Unavailable, v1alpha1.ReasonDisconnected, "sending an ack: %v", err)
		}
	case f.Heartbeat != nil:
		h.Store.Touch(reg.Name)
	}
	return nil
}

// recvEnded is why the stream ended when receiving failed; nil when the member closed it.
func recvEnded(err error) *streamError {
	if errors.Is(err, io.EOF) || status.Code(err) == codes.Canceled {
		return nil
	}
	return classifyRecv(err)
}

// classifyRecv names why receiving a frame failed.
func classifyRecv(err error) *streamError {
	st, _ := status.FromError(err)
	switch {
	case st.Code() == codes.ResourceExhausted:
		return endStream(codes.ResourceExhausted, v1alpha1.ReasonFrameTooLarge, "%s", st.Message())
	case st.Code() == codes.Internal && strings.Contains(st.Message(), "unmarshal"):
		return endStream(codes.InvalidArgument, v1alpha1.ReasonMalformedFrame, "%s", st.Message())
	case errors.Is(err, io.EOF):
		return endStream(codes.OK, v1alpha1.ReasonDisconnected, "the member closed its stream")
	}
	return endStream(codes.Unavailable, v1alpha1.ReasonDisconnected, "%s", st.Message())
}

// supersede ends the member's previous stream: one stream per member, the newest wins.
func (h *Hub) supersede(name string, cancel context.CancelCauseFunc) *activeStream {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.active == nil {
		h.active = map[string]*activeStream{}
	}
	if old := h.active[name]; old != nil {
		old.cancel(endStream(codes.Aborted, v1alpha1.ReasonDisconnected, "superseded by a newer stream of the same member"))
	}
	a := &activeStream{cancel: cancel}
	h.active[name] = a
	return a
}

func (h *Hub) release(name string, a *activeStream) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.active[name] == a {
		delete(h.active, name)
	}
}

func (h *Hub) limiter(name string) *rate.Limiter {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.limiters == nil {
		h.limiters = map[string]*rate.Limiter{}
	}
	l := h.limiters[name]
	if l == nil {
		r, b := h.FrameRate, h.FrameBurst
		if r <= 0 {
			r = DefaultFrameRate
		}
		if b <= 0 {
			b = DefaultFrameBurst
		}
		l = rate.NewLimiter(rate.Limit(r), b)
		h.limiters[name] = l
	}
	return l
}

// Disconnect ends a member's stream (tests; and a deleted registration).
func (h *Hub) Disconnect(name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if a := h.active[name]; a != nil {
		a.cancel(endStream(codes.Aborted, v1alpha1.ReasonDisconnected, "the hub closed the stream"))
	}
}

func peerSVID(ctx context.Context) (*x509.Certificate, spiffeid.ID, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil, spiffeid.ID{}, errors.New("no peer")
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.PeerCertificates) == 0 {
		return nil, spiffeid.ID{}, errors.New("the member presented no certificate")
	}
	leaf := info.State.PeerCertificates[0]
	id, err := x509svid.IDFromCert(leaf)
	if err != nil {
		return nil, spiffeid.ID{}, err
	}
	return leaf, id, nil
}
