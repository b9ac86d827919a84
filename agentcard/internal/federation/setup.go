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
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"

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

// Options are the federation flags: a member's (member.Options: the cluster's name and the
// identity, which a hub shares, and the hub to dial) and a hub's.
type Options struct {
	Mode string
	member.Options

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
}

// BindFlags adds the federation flags to f.
func (o *Options) BindFlags(f *pflag.FlagSet) {
	f.StringVar(&o.Mode, "federation", "", "AgentCard federation role: hub (accept member streams, serve their cards in the discovery API), member (stream this cluster's exported cards to a hub; kagenti-agentcard-federation-member runs the member agent alone), or empty")
	o.Options.BindFlags(f)
	f.StringVar(&o.BindAddress, "federation-bind-address", ":9443", "hub: address of the federation endpoint (gRPC over mutual TLS)")
	f.IntVar(&o.MaxFrameBytes, "federation-max-frame-bytes", hub.DefaultMaxFrameBytes, "hub: largest frame a member may send; a larger one closes its stream (FrameTooLarge)")
	f.Float64Var(&o.FrameRate, "federation-frame-rate", hub.DefaultFrameRate, "hub: frames per second each member may send (RateLimited beyond)")
	f.IntVar(&o.FrameBurst, "federation-frame-burst", hub.DefaultFrameBurst, "hub: burst of frames above --federation-frame-rate (a full resync must fit)")
	f.DurationVar(&o.BundleFetchTimeout, "federation-bundle-fetch-timeout", hub.DefaultBundleFetchTimeout, "hub: timeout of one fetch of a member's SPIFFE bundle endpoint (FederatedCluster spec.bundleEndpoint)")
}

// Validate checks the flags of the chosen mode.
func (o *Options) Validate() error {
	switch o.Mode {
	case ModeOff:
		return nil
	case ModeMember:
		return o.Options.Validate()
	case ModeHub:
	default:
		return fmt.Errorf("--federation=%q: use hub, member or nothing", o.Mode)
	}
	if err := o.ValidateIdentity(); err != nil {
		return err
	}
	if _, _, err := net.SplitHostPort(o.BindAddress); err != nil {
		return fmt.Errorf("--federation-bind-address=%q: %w", o.BindAddress, err)
	}
	if o.ClusterName == "" {
		return errors.New("--federation=hub needs --cluster-name (the cluster field of the hub's own cards)")
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
		return member.Setup(ctx, mgr, o.Options)
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
