package authconfig

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/kagenti/platform/pkg/configmap"
)

// The sidecars read their files where the injector mounts them. The data-plane binary does not
// import pkg/configmap (it would pull the controller libraries into every pod), so this test holds
// its copies of the mount paths to the contract.
func TestMountPathsAreTheInjectors(t *testing.T) {
	assert.Equal(t, configmap.PathIdentity, ConfigDir, "v4 projects the ConfigMap into the identity volume")
	assert.Equal(t, configmap.PathTokenExchange, LegacyConfigDir)
	assert.Equal(t, configmap.PathIdentity, IdentityDir)
	assert.Equal(t, configmap.IdentityPodNameFile, EnvPodName)
	assert.Equal(t, configmap.IdentityPodNamespaceFile, EnvPodNamespace)
	assert.Equal(t, configmap.PathShared, SharedDir)
	assert.Equal(t, configmap.PathSpireSocket, SpireSocketDir)
}
