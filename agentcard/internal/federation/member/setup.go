package member

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/spf13/pflag"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/kagenti/platform/agentcard/internal/federation/tlsid"
)

// Options are a member's federation flags: its name, its identity and its hub.
type Options struct {
	// ClusterName is the member's FederatedCluster name on the hub (default: the About API's
	// cluster.clusterset.k8s.io). On a hub, the same flag names the cluster of its own cards.
	ClusterName string
	// Identity: the Workload API socket, or certificate files (a per-cluster CA).
	SPIFFESocket, CertFile, KeyFile string
	// HubAddress is host:port of the hub's federation endpoint, HubSpiffeID the identity it must
	// present, HubBundleFile its trust domain's bundle (with CertFile).
	HubAddress, HubSpiffeID, HubBundleFile string
}

// BindFlags adds the flags of a member (and the name and identity flags a hub shares) to f.
func (o *Options) BindFlags(f *pflag.FlagSet) {
	f.StringVar(&o.ClusterName, "cluster-name", "", "this cluster's name in the federation: on a hub, the cluster of its own cards; on a member, its FederatedCluster name on the hub (default: the About API ClusterProperty cluster.clusterset.k8s.io)")
	f.StringVar(&o.SPIFFESocket, "federation-spiffe-socket", "", "SPIFFE Workload API socket (unix:///...) for the federation's X.509-SVID and trust bundles; or use --federation-cert-file/--federation-key-file")
	f.StringVar(&o.CertFile, "federation-cert-file", "", "PEM X.509-SVID chain of this side of the federation (re-read when it changes)")
	f.StringVar(&o.KeyFile, "federation-key-file", "", "PEM private key of --federation-cert-file")
	f.StringVar(&o.HubAddress, "federation-hub-address", "", "member: host:port of the hub's federation endpoint")
	f.StringVar(&o.HubSpiffeID, "federation-hub-spiffe-id", "", "member: the SPIFFE ID the hub must present")
	f.StringVar(&o.HubBundleFile, "federation-hub-bundle-file", "", "member: PEM trust bundle of the hub's trust domain (with --federation-cert-file; the Workload API provides it through SPIFFE federation otherwise)")
}

// ValidateIdentity checks that exactly one identity is given.
func (o *Options) ValidateIdentity() error {
	if (o.SPIFFESocket == "") == (o.CertFile == "" || o.KeyFile == "") {
		return errors.New("--federation needs exactly one identity: --federation-spiffe-socket, or --federation-cert-file with --federation-key-file")
	}
	return nil
}

// Validate checks a member's flags.
func (o *Options) Validate() error {
	if err := o.ValidateIdentity(); err != nil {
		return err
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

// Setup adds the member agent to mgr: it keeps a log of the exported AgentCards in mgr's cache
// and, on the leader, streams it to the hub. o has passed Validate (the callers check the flags
// before anything connects). ctx only registers the informer.
func Setup(ctx context.Context, mgr ctrl.Manager, o Options) error {
	hubID, err := spiffeid.FromString(o.HubSpiffeID)
	if err != nil {
		return fmt.Errorf("--federation-hub-spiffe-id=%q: %w", o.HubSpiffeID, err)
	}
	cards := NewLog()
	if err := Watch(ctx, mgr.GetCache(), cards); err != nil {
		return err
	}
	return mgr.Add(leaderRunnable(func(ctx context.Context) error {
		logger := log.FromContext(ctx).WithName("federation-member")
		clusterID, err := ClusterID(ctx, mgr.GetAPIReader())
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
		a := &Agent{Cluster: name, ClusterID: clusterID, HubAddress: o.HubAddress, Log: cards, Logger: logger,
			TLS: tlsid.ClientConfig(src.SVID, src.Bundles, hubID)}
		logger.Info("streaming exported AgentCards to the federation hub", "hub", o.HubAddress, "cluster", name)
		return a.Start(ctx)
	}))
}

// leaderRunnable runs f on the leader only: one member agent streams at a time.
type leaderRunnable func(context.Context) error

func (f leaderRunnable) Start(ctx context.Context) error { return f(ctx) }
func (leaderRunnable) NeedLeaderElection() bool          { return true }
