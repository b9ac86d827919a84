package card_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/gowebpki/jcs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kagenti/platform/agentcard/internal/card"
	"github.com/kagenti/platform/agentcard/internal/testcards"
)

// RFC 8785 §3.2.2 / appendix examples.
func TestCanonicalizationVectors(t *testing.T) {
	cases := []struct{ in, want string }{
		{`{"numbers":[333333333.33333329,1E30,4.50,2e-3,0.000000000000000000000000001],"string":"\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/","literals":[null,true,false]}`,
			`{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}`},
		{`{"\u20ac":"Euro Sign","\r":"Carriage Return","1":"One","\u0080":"Control","\ud83d\ude00":"Smiley","\u00f6":"Latin Small Letter O With Diaeresis","\ufb33":"Hebrew Letter Dalet With Dagesh","</script>":"Browser Challenge"}`,
			"{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"</script>\":\"Browser Challenge\",\"\u0080\":\"Control\",\"\u00f6\":\"Latin Small Letter O With Diaeresis\",\"\u20ac\":\"Euro Sign\",\"\U0001F600\":\"Smiley\",\"\ufb33\":\"Hebrew Letter Dalet With Dagesh\"}"},
	}
	for _, c := range cases {
		var obj map[string]any
		dec := json.NewDecoder(stringsReader(c.in))
		dec.UseNumber()
		require.NoError(t, dec.Decode(&obj))
		got, err := card.CanonicalPayload(obj)
		require.NoError(t, err)
		assert.Equal(t, c.want, string(got))
		direct, err := jcs.Transform([]byte(c.in))
		require.NoError(t, err)
		assert.Equal(t, c.want, string(direct))
	}
}

func TestCanonicalPayloadDropsSignaturesAndIgnoresFormatting(t *testing.T) {
	a, err := card.Parse([]byte(`{"name":"a","description":"d","version":"1","url":"http://x","capabilities":{},"defaultInputModes":[],"defaultOutputModes":[],"skills":[]}`))
	require.NoError(t, err)
	b, err := card.Parse([]byte(`{ "skills":[], "url":"http://x","version":"1","description":"d","name":"a","capabilities":{},
	  "defaultOutputModes":[],"defaultInputModes":[],"signatures":[{"protected":"e30","signature":"AA"}]}`))
	require.NoError(t, err)
	assert.Equal(t, a.Hash, b.Hash)
	assert.Len(t, b.Signatures, 1)
}

func TestParseValid(t *testing.T) {
	c, err := card.Parse(testcards.Weather("2.1.0"))
	require.NoError(t, err)
	assert.Equal(t, "Weather Intelligence Agent", c.Name)
	assert.Equal(t, "2.1.0", c.Version)
	assert.Len(t, c.Skills, 2)
	assert.ElementsMatch(t, []string{"weather", "forecast", "climate"}, c.SkillTags())

	v1 := mutate(t, testcards.Weather("1"), func(m map[string]any) {
		delete(m, "url")
		delete(m, "protocolVersion")
		m["supportedInterfaces"] = []any{map[string]any{"url": "http://x:8080", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}}
	})
	_, err = card.Parse(v1)
	assert.NoError(t, err, "v1.0 shape")

	v1grpc := mutate(t, v1, func(m map[string]any) {
		m["supportedInterfaces"] = []any{map[string]any{"url": "weather:50051", "protocolBinding": "GRPC", "protocolVersion": "1.0"}}
	})
	_, err = card.Parse(v1grpc)
	assert.NoError(t, err, "v1.0 gRPC interface with a host:port target")
}

func TestParseInvalid(t *testing.T) {
	cases := []struct {
		name  string
		raw   []byte
		field string
	}{
		{"not json", []byte("<html>"), ""},
		{"array", []byte("[1]"), ""},
		{"missing name", mutate(t, testcards.Weather("1"), func(m map[string]any) { delete(m, "name") }), "name"},
		{"name not string", mutate(t, testcards.Weather("1"), func(m map[string]any) { m["name"] = 3 }), "name"},
		{"missing url (v0.3)", mutate(t, testcards.Weather("1"), func(m map[string]any) { delete(m, "url") }), "url"},
		{"relative url", mutate(t, testcards.Weather("1"), func(m map[string]any) { m["url"] = "/a2a" }), "url"},
		{"capabilities not object", mutate(t, testcards.Weather("1"), func(m map[string]any) { m["capabilities"] = "x" }), "capabilities"},
		{"input modes", mutate(t, testcards.Weather("1"), func(m map[string]any) { m["defaultInputModes"] = []any{1} }), "defaultInputModes[0]"},
		{"skill without id", mutate(t, testcards.Weather("1"), func(m map[string]any) { delete(m["skills"].([]any)[1].(map[string]any), "id") }), "skills[1].id"},
		{"skill tags", mutate(t, testcards.Weather("1"), func(m map[string]any) { m["skills"].([]any)[0].(map[string]any)["tags"] = "weather" }), "skills[0].tags"},
		{"v1 empty interfaces", mutate(t, testcards.Weather("1"), func(m map[string]any) { m["supportedInterfaces"] = []any{} }), "supportedInterfaces"},
		{"v1 interface binding", mutate(t, testcards.Weather("1"), func(m map[string]any) {
			m["supportedInterfaces"] = []any{map[string]any{"url": "http://x"}}
		}), "supportedInterfaces[0].protocolBinding"},
		{"signature shape", mutate(t, testcards.Weather("1"), func(m map[string]any) { m["signatures"] = []any{map[string]any{"protected": "x"}} }), "signatures[0].signature"},
		{"empty name", mutate(t, testcards.Weather("1"), func(m map[string]any) { m["name"] = "  " }), "name"},
		{"version not a string", mutate(t, testcards.Weather("1"), func(m map[string]any) { m["version"] = 2 }), "version"},
		{"protocolVersion not a string", mutate(t, testcards.Weather("1"), func(m map[string]any) { m["protocolVersion"] = 0.3 }), "protocolVersion"},
		{"description not a string", mutate(t, testcards.Weather("1"), func(m map[string]any) { m["description"] = []any{} }), "description"},
		{"capabilities missing", mutate(t, testcards.Weather("1"), func(m map[string]any) { delete(m, "capabilities") }), "capabilities"},
		{"capabilities null", mutate(t, testcards.Weather("1"), func(m map[string]any) { m["capabilities"] = nil }), "capabilities"},
		{"skills not a list", mutate(t, testcards.Weather("1"), func(m map[string]any) { m["skills"] = map[string]any{} }), "skills"},
		{"skill id empty", mutate(t, testcards.Weather("1"), func(m map[string]any) { m["skills"].([]any)[0].(map[string]any)["id"] = "" }), "skills[0].id"},
		{"host:port for JSON-RPC", mutate(t, testcards.Weather("1"), func(m map[string]any) { m["url"] = "weather:8080" }), "url"},
		{"host:port for HTTP+JSON", mutate(t, testcards.Weather("1"), func(m map[string]any) {
			m["url"], m["preferredTransport"] = "10.0.0.1:8080", "HTTP+JSON"
		}), "url"},
		{"not a gRPC target", mutate(t, testcards.Weather("1"), func(m map[string]any) {
			m["url"], m["preferredTransport"] = "weather agent", "GRPC"
		}), "url"},
		{"gRPC port out of range", mutate(t, testcards.Weather("1"), func(m map[string]any) {
			m["url"], m["preferredTransport"] = "weather:70000", "GRPC"
		}), "url"},
		{"preferredTransport not a string", mutate(t, testcards.Weather("1"), func(m map[string]any) { m["preferredTransport"] = true }), "preferredTransport"},
		{"additionalInterfaces not a list", mutate(t, testcards.Weather("1"), func(m map[string]any) { m["additionalInterfaces"] = "x" }), "additionalInterfaces"},
		{"additional interface without url", mutate(t, testcards.Weather("1"), func(m map[string]any) {
			m["additionalInterfaces"] = []any{map[string]any{"url": "http://a", "transport": "JSONRPC"}, map[string]any{"transport": "GRPC"}}
		}), "additionalInterfaces[1].url"},
		{"additional interface without transport", mutate(t, testcards.Weather("1"), func(m map[string]any) {
			m["additionalInterfaces"] = []any{map[string]any{"url": "http://a"}}
		}), "additionalInterfaces[0].transport"},
		{"v1 interface url relative", mutate(t, testcards.Weather("1"), func(m map[string]any) {
			m["supportedInterfaces"] = []any{map[string]any{"url": "/a2a", "protocolBinding": "JSONRPC"}}
		}), "supportedInterfaces[0].url"},
		{"oversize", mutate(t, testcards.Weather("1"), func(m map[string]any) { m["description"] = strings.Repeat("x", card.MaxBytes) }), ""},
		{"trailing data", append(testcards.Weather("1"), []byte(" {}")...), ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := card.Parse(c.raw)
			require.Error(t, err)
			var ie *card.InvalidError
			require.ErrorAs(t, err, &ie)
			assert.Equal(t, c.field, ie.Field, err.Error())
		})
	}
}

func mutate(t *testing.T, raw []byte, f func(map[string]any)) []byte {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(raw, &m))
	f(m)
	return testcards.Must(m)
}
