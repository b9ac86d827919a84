package federation_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kagenti/platform/agentcard/internal/federation"
	"github.com/kagenti/platform/agentcard/internal/federation/member"
)

func TestFlagsNameWhatIsMissing(t *testing.T) {
	socket := member.Options{SPIFFESocket: "unix:///s"}
	hub := func(m member.Options) federation.Options {
		return federation.Options{Mode: "hub", BindAddress: ":9443", Options: m}
	}
	for _, tc := range []struct {
		name string
		o    federation.Options
		want string
	}{
		{"unknown mode", federation.Options{Mode: "both"}, `--federation="both"`},
		{"no identity", hub(member.Options{ClusterName: "hub"}), "--federation-spiffe-socket"},
		{"two identities", hub(member.Options{ClusterName: "hub", SPIFFESocket: "unix:///s", CertFile: "c", KeyFile: "k"}), "exactly one identity"},
		{"hub without a cluster name", hub(socket), "--cluster-name"},
		{"member without an identity", federation.Options{Mode: "member", Options: member.Options{HubAddress: "hub:9443", HubSpiffeID: "spiffe://hub/x"}}, "exactly one identity"},
		{"member without a hub address", federation.Options{Mode: "member", Options: member.Options{SPIFFESocket: "unix:///s", HubSpiffeID: "spiffe://hub/x"}}, "--federation-hub-address"},
		{"member with a bad hub identity", federation.Options{Mode: "member", Options: member.Options{SPIFFESocket: "unix:///s", HubAddress: "hub:9443", HubSpiffeID: "hub"}}, "--federation-hub-spiffe-id"},
		{"member with files but no hub bundle", federation.Options{Mode: "member", Options: member.Options{CertFile: "c", KeyFile: "k", HubAddress: "hub:9443", HubSpiffeID: "spiffe://hub/x"}}, "--federation-hub-bundle-file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.o.Validate()
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
		})
	}
	require.NoError(t, (&federation.Options{}).Validate())
	require.NoError(t, (&federation.Options{Mode: "member", Options: member.Options{SPIFFESocket: "unix:///s", HubAddress: "hub:9443", HubSpiffeID: "spiffe://hub/x"}}).Validate())
	o := hub(socket)
	o.ClusterName = "hub"
	require.NoError(t, o.Validate())
}
