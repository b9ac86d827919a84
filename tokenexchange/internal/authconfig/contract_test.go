package authconfig

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/kagenti/platform/pkg/configmap/contract"
)

// The sidecars read their files where the injector mounts them. The data-plane binary does not
// import pkg/configmap (it would pull the controller libraries into every pod), so this test holds
// its copies of the mount paths to the contract.
func TestMountPathsAreTheInjectors(t *testing.T) {
	assert.Equal(t, contract.PathIdentity, ConfigDir, "v4 projects the ConfigMap into the identity volume")
	assert.Equal(t, contract.PathTokenExchange, LegacyConfigDir)
	assert.Equal(t, contract.PathIdentity, IdentityDir)
	assert.Equal(t, contract.IdentityPodNameFile, EnvPodName)
	assert.Equal(t, contract.IdentityPodNamespaceFile, EnvPodNamespace)
	assert.Equal(t, contract.PathShared, SharedDir)
	assert.Equal(t, contract.PathSpireSocket, SpireSocketDir)
}
