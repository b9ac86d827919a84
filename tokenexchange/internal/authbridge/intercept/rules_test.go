package intercept

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/kagenti/platform/tokenexchange/internal/authconfig"
)

func TestRulesFor(t *testing.T) {
	c := authconfig.Config{
		Inbound: authconfig.Inbound{Enabled: true, Port: 8080, ExcludePorts: []int32{9090}},
		Outbound: authconfig.Outbound{Enabled: true, Interception: authconfig.Interception{
			Enabled: true, ProxyPort: 15123, ProxyUID: 1337, ExcludePorts: []int32{5432, 9901}}},
	}
	assert.Equal(t, Rules{
		Outbound: true, ProxyPort: 15123, ProxyUID: 1337, OutboundExclude: []uint16{5432, 9901},
		Inbound: true, InboundPort: 8080, InboundExclude: []uint16{8080, 9090, 15124, 15125},
	}, RulesFor(c, []uint16{15125, 15124}))

	c.Outbound.Interception.Enabled = false
	c.Inbound.Enabled = false
	r := RulesFor(c, nil)
	assert.False(t, r.Outbound)
	assert.False(t, r.Inbound)
	assert.Equal(t, "# no interception: table inet kagenti removed\n", r.Describe())

	c.Outbound.Interception.Enabled = true
	c.Outbound.Enabled = false
	assert.False(t, RulesFor(c, nil).Outbound, "outbound off: nothing is redirected to a proxy that does not exchange")
}

func TestRulesValidate(t *testing.T) {
	assert.NoError(t, Rules{}.Validate())
	assert.ErrorContains(t, Rules{Outbound: true, ProxyPort: 15123}.Validate(), "non-root UID")
	assert.ErrorContains(t, Rules{Inbound: true}.Validate(), "inbound port")
}
