package federation_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kagenti/platform/agentcard/internal/federation"
)

func TestFlagsNameWhatIsMissing(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    federation.Options
		want string
	}{
		{"unknown mode", federation.Options{Mode: "both"}, `--federation="both"`},
		{"no identity", federation.Options{Mode: "hub", BindAddress: ":9443", ClusterName: "hub"}, "--federation-spiffe-socket"},
		{"two identities", federation.Options{Mode: "hub", BindAddress: ":9443", ClusterName: "hub", SPIFFESocket: "unix:///s", CertFile: "c", KeyFile: "k"}, "exactly one identity"},
		{"hub without a cluster name", federation.Options{Mode: "hub", BindAddress: ":9443", SPIFFESocket: "unix:///s"}, "--cluster-name"},
		{"member without a hub address", federation.Options{Mode: "member", SPIFFESocket: "unix:///s", HubSpiffeID: "spiffe://hub/x"}, "--federation-hub-address"},
		{"member with a bad hub identity", federation.Options{Mode: "member", SPIFFESocket: "unix:///s", HubAddress: "hub:9443", HubSpiffeID: "hub"}, "--federation-hub-spiffe-id"},
		{"member-only without the member role", federation.Options{MemberOnly: true}, "--federation-member-only needs --federation=member"},
		{"member-only on a hub", federation.Options{Mode: "hub", MemberOnly: true, BindAddress: ":9443", ClusterName: "hub", SPIFFESocket: "unix:///s"}, "--federation-member-only needs --federation=member"},
		{"member with files but no hub bundle", federation.Options{Mode: "member", CertFile: "c", KeyFile: "k", HubAddress: "hub:9443", HubSpiffeID: "spiffe://hub/x"}, "--federation-hub-bundle-file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.o.Validate()
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
		})
	}
	require.NoError(t, (&federation.Options{}).Validate())
	require.NoError(t, (&federation.Options{Mode: "member", SPIFFESocket: "unix:///s", HubAddress: "hub:9443", HubSpiffeID: "spiffe://hub/x"}).Validate())
	require.NoError(t, (&federation.Options{Mode: "member", MemberOnly: true, SPIFFESocket: "unix:///s", HubAddress: "hub:9443", HubSpiffeID: "spiffe://hub/x"}).Validate())
}
