// Package federation wires the AgentCard federation into the agentcard binary: --federation=hub
// serves member streams and adds the members' cards to the discovery API; --federation=member
// streams this cluster's exported cards to a hub. See docs/federation.md.
package federation

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/spf13/pflag"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/kagenti/platform/agentcard/internal/discovery"
	"github.com/kagenti/platform/agentcard/internal/federation/hub"
	"github.com/kagenti/platform/agentcard/internal/federation/member"
	"github.com/kagenti/platform/agentcard/internal/federation/tlsid"
)

// The hub reads the registrations and writes their status.
// +kubebuilder:rbac:groups=kagenti.io,resources=federatedclusters,verbs=get;list;watch
// +kubebuilder:rbac:groups=kagenti.io,resources=federatedclusters/status,verbs=get;patch;update

// Modes of --federation.
const (
	ModeOff    = ""
	ModeHub    = "hub"
	ModeMember = "member"
)

// Options are the federation flags.
type Options struct {
	Mode string
	// ClusterName: on a hub, the cluster field of its own cards; on a member, its registration
	// name on the hub (default: the About API's cluster.clusterset.k8s.io).
	ClusterName string
	// Identity: the Workload API socket, or certificate files (a per-cluster CA).
	SPIFFESocket, CertFile, KeyFile string

	// Hub.
	BindAddress   string
	MaxFrameBytes int
	FrameRate     float64
	FrameBurst    int
	// BundleFetchTimeout bounds one fetch of a member's bundle endpoint (spec.bundleEndpoint).
	BundleFetchTimeout time.Duration
	// Pod is this replica's pod (not a flag: POD_NAME or the hostname). The leader labels it
	// (hub.LeaderLabel), and a follower's discovery API forwards the members' cards to the
	// labelled pod. Empty: neither.
	Pod string

	// Member.
	HubAddress, HubSpiffeID, HubBundleFile string
	// MemberOnly runs the member agent alone: no AgentCard controller and no discovery API in
	// this process (a small Deployment beside the agentcard controller, which verifies the cards).
	MemberOnly bool
}

// BindFlags adds the federation flags to f.
func (o *Options) BindFlags(f *pflag.FlagSet) {
	f.StringVar(&o.Mode, "federation", "", "AgentCard federation role: hub (accept member streams, serve their cards in the discovery API), member (stream this cluster's exported cards to a hub), or empty")
	f.StringVar(&o.ClusterName, "cluster-name", "", "this cluster's name in the federation: on a hub, the cluster of its own cards; on a member, its FederatedCluster name on the hub (default: the About API ClusterProperty cluster.clusterset.k8s.io)")
	f.StringVar(&o.SPIFFESocket, "federation-spiffe-socket", "", "SPIFFE Workload API socket (unix:///...) for the federation's X.509-SVID and trust bundles; or use --federation-cert-file/--federation-key-file")
	f.StringVar(&o.CertFile, "federation-cert-file", "", "PEM X.509-SVID chain of this side of the federation (re-read when it changes)")
	f.StringVar(&o.KeyFile, "federation-key-file", "", "PEM private key of --federation-cert-file")
	f.StringVar(&o.BindAddress, "federation-bind-address", ":9443", "hub: address of the federation endpoint (gRPC over mutual TLS)")
	f.IntVar(&o.MaxFrameBytes, "federation-max-frame-bytes", hub.DefaultMaxFrameBytes, "hub: largest frame a member may send; a larger one closes its stream (FrameTooLarge)")
	f.Float64Var(&o.FrameRate, "federation-frame-rate", hub.DefaultFrameRate, "hub: frames per second each member may send (RateLimited beyond)")
	f.IntVar(&o.FrameBurst, "federation-frame-burst", hub.DefaultFrameBurst, "hub: burst of frames above --federation-frame-rate (a full resync must fit)")
	f.DurationVar(&o.BundleFetchTimeout, "federation-bundle-fetch-timeout", hub.DefaultBundleFetchTimeout, "hub: timeout of one fetch of a member's SPIFFE bundle endpoint (FederatedCluster spec.bundleEndpoint)")
	f.StringVar(&o.HubAddress, "federation-hub-address", "", "member: host:port of the hub's federation endpoint")
	f.StringVar(&o.HubSpiffeID, "federation-hub-spiffe-id", "", "member: the SPIFFE ID the hub must present")
	f.BoolVar(&o.MemberOnly, "federation-member-only", false, "member: run only the member agent (no AgentCard controller, no discovery API), as a Deployment of its own beside the agentcard controller that verifies the cards")
	f.StringVar(&o.HubBundleFile, "federation-hub-bundle-file", "", "member: PEM trust bundle of the hub's trust domain (with --federation-cert-file; the Workload API provides it through SPIFFE federation otherwise)")
}

// Validate checks the flags of the chosen mode.
func (o *Options) Validate() error {
	if o.MemberOnly && o.Mode != ModeMember {
		return fmt.Errorf("--federation-member-only needs --federation=member, not %q", o.Mode)
	}
	switch o.Mode {
	case ModeOff:
		return nil
	case ModeHub, ModeMember:
	default:
		return fmt.Errorf("--federation=%q: use hub, member or nothing", o.Mode)
	}
	if (o.SPIFFESocket == "") == (o.CertFile == "" || o.KeyFile == "") {
		return errors.New("--federation needs exactly one identity: --federation-spiffe-socket, or --federation-cert-file with --federation-key-file")
	}
	if o.Mode == ModeHub {
		if _, _, err := net.SplitHostPort(o.BindAddress); err != nil {
			return fmt.Errorf("--federation-bind-address=%q: %w", o.BindAddress, err)
		}
		if o.ClusterName == "" {
			return errors.New("--federation=hub needs --cluster-name (the cluster field of the hub's own cards)")
		}
		return nil
	}
	if _, _, err := net.SplitHostPort(o.HubAddress); err != nil {
		return fmt.Errorf("--federation-hub-address=%q must be host:port: %w", o.HubAddress, err)
	}
	if _, err := spiffeid.FromString(o.HubSpiffeID); err != nil {
		return fmt.Errorf("--federation-hub-spiffe-id=%q: %w", o.HubSpiffeID, err)
	}
	if o.CertFile != "" && o.HubBundleFile == "" {
		return errors.New("--federation-cert-file needs --federation-hub-bundle-file (the hub trust domain's bundle)")
	}
	return nil
}

// Setup adds the federation role to mgr. On a hub it sets disc.Remote and disc.LocalCluster so
// the discovery API serves the members' cards.
func Setup(ctx context.Context, mgr ctrl.Manager, o Options, disc *discovery.Options) error {
	if err := o.Validate(); err != nil {
		return err
	}
	switch o.Mode {
	case ModeHub:
		return setupHub(mgr, o, disc)
	case ModeMember:
		return setupMember(ctx, mgr, o)
	}
	return nil
}

func setupHub(mgr ctrl.Manager, o Options, disc *discovery.Options) error {
	logger := mgr.GetLogger().WithName("federation-hub")
	registry := hub.NewRegistry()
	store := hub.NewStore(clock.RealClock{})
	h := &hub.Hub{Registry: registry, Store: store, Log: logger, MaxFrameBytes: o.MaxFrameBytes, FrameRate: o.FrameRate, FrameBurst: o.FrameBurst}
	disc.Remote, disc.LocalCluster = store, o.ClusterName
	if o.Pod != "" {
		disc.Pod = o.Pod
		if err := mgr.Add(&hub.LeaderLabel{Client: mgr.GetClient(), Namespace: disc.Namespace, Pod: o.Pod, Store: store, Log: logger}); err != nil {
			return err
		}
	}
	if err := mgr.Add(&hub.StatusWriter{Client: mgr.GetClient(), Registry: registry, Store: store, Clock: clock.RealClock{}, Interval: time.Second, Log: logger}); err != nil {
		return err
	}
	if err := mgr.Add(&hub.BundleRefresher{Registry: registry, Clock: clock.RealClock{}, Tick: time.Second,
		Timeout: o.BundleFetchTimeout, Log: logger.WithName("bundles")}); err != nil {
		return err
	}
	return mgr.Add(&hub.Server{Hub: h, Address: o.BindAddress, Identity: func(ctx context.Context) (tlsid.Sources, error) {
		if o.SPIFFESocket != "" {
			return tlsid.FromWorkloadAPI(ctx, o.SPIFFESocket)
		}
		return tlsid.Sources{SVID: &tlsid.FileSource{CertFile: o.CertFile, KeyFile: o.KeyFile}}, nil
	}})
}

func setupMember(ctx context.Context, mgr ctrl.Manager, o Options) error {
	hubID := spiffeid.RequireFromString(o.HubSpiffeID)
	cards := member.NewLog()
	if err := member.Watch(ctx, mgr.GetCache(), cards); err != nil {
		return err
	}
	return mgr.Add(ctrlRunnable(func(ctx context.Context) error {
		logger := log.FromContext(ctx).WithName("federation-member")
		clusterID, err := member.ClusterID(ctx, mgr.GetAPIReader())
		if err != nil {
			return err
		}
		name := o.ClusterName
		if name == "" {
			name = clusterID
		}
		if name == "" {
			return errors.New("--federation=member needs --cluster-name: this cluster has no About API ClusterProperty " + "cluster.clusterset.k8s.io")
		}
		var src tlsid.Sources
		if o.SPIFFESocket != "" {
			if src, err = tlsid.FromWorkloadAPI(ctx, o.SPIFFESocket); err != nil {
				return err
			}
			defer src.Close()
		} else {
			src = tlsid.FromFiles(o.CertFile, o.KeyFile, hubID.TrustDomain(), o.HubBundleFile)
		}
		a := &member.Agent{Cluster: name, ClusterID: clusterID, HubAddress: o.HubAddress, Log: cards, Logger: logger,
			TLS: tlsid.ClientConfig(src.SVID, src.Bundles, hubID)}
		logger.Info("streaming exported AgentCards to the federation hub", "hub", o.HubAddress, "cluster", name)
		return a.Start(ctx)
	}))
}

// ctrlRunnable runs f on the leader only: one member agent streams at a time.
type ctrlRunnable func(context.Context) error

func (f ctrlRunnable) Start(ctx context.Context) error { return f(ctx) }
func (ctrlRunnable) NeedLeaderElection() bool          { return true }
