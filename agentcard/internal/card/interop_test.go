package card_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"unicode/utf8"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kagenti/platform/agentcard/internal/card"
)

// Cards as the official Go SDK (a2a-go v0.3.3) writes them: its struct has no omitempty on
// version, protocolVersion, description, the mode lists, skills and tags, so unset fields come
// out as "" and null; a gRPC endpoint is a dial target (host:port), as in its helloworld example.
func TestParseCardsFromTheA2AGoSDK(t *testing.T) {
	helloSkill := a2a.AgentSkill{
		ID: "hello_world", Name: "Hello, world!", Description: "Returns a 'Hello, world!'",
		Tags: []string{"hello world"}, Examples: []string{"hi", "hello"},
	}
	cases := map[string]a2a.AgentCard{
		"helloworld JSON-RPC example": {
			Name: "Hello World Agent", Description: "Just a hello world agent",
			URL: "http://127.0.0.1:9001/invoke", PreferredTransport: a2a.TransportProtocolJSONRPC,
			DefaultInputModes: []string{"text"}, DefaultOutputModes: []string{"text"},
			Capabilities: a2a.AgentCapabilities{Streaming: true}, Skills: []a2a.AgentSkill{helloSkill},
		},
		"helloworld gRPC example (url is host:port)": {
			Name: "Hello World Agent", Description: "Just a hello world agent",
			URL: "127.0.0.1:9000", PreferredTransport: a2a.TransportProtocolGRPC,
			DefaultInputModes: []string{"text"}, DefaultOutputModes: []string{"text"},
			Capabilities: a2a.AgentCapabilities{Streaming: true}, Skills: []a2a.AgentSkill{helloSkill},
		},
		"gRPC preferred, service DNS name, additional interfaces": {
			Name: "Weather", Description: "Forecasts", Version: "2.0.0", ProtocolVersion: "0.3.0",
			URL: "weather-agent.agents.svc.cluster.local:50051", PreferredTransport: a2a.TransportProtocolGRPC,
			AdditionalInterfaces: []a2a.AgentInterface{
				{Transport: a2a.TransportProtocolGRPC, URL: "weather-agent.agents.svc.cluster.local:50051"},
				{Transport: a2a.TransportProtocolJSONRPC, URL: "http://weather-agent.agents.svc.cluster.local:8080/"},
				{Transport: a2a.TransportProtocolHTTPJSON, URL: "http://weather-agent.agents.svc.cluster.local:8080/v1"},
				{Transport: a2a.TransportProtocolGRPC, URL: "dns:///weather-agent.agents:50051"},
			},
			DefaultInputModes: []string{"text/plain"}, DefaultOutputModes: []string{"application/json"},
			Skills:   []a2a.AgentSkill{{ID: "forecast", Name: "Forecast", Tags: []string{"weather"}}},
			Provider: &a2a.AgentProvider{Org: "Example", URL: "https://example.com"},
		},
		"every optional string empty, nil lists": {
			Name: "Minimal", URL: "https://agent.example.com/a2a",
			Skills: []a2a.AgentSkill{{ID: "only-an-id"}},
		},
		"no skills at all": {Name: "Skill-less", URL: "http://[::1]:8080/"},
		"signed, with security schemes": {
			Name: "Signed", URL: "https://agent.example.com/a2a", Version: "1",
			SecuritySchemes: a2a.NamedSecuritySchemes{"bearer": a2a.HTTPAuthSecurityScheme{Scheme: "Bearer"}},
			Security:        []a2a.SecurityRequirements{{"bearer": a2a.SecuritySchemeScopes{}}},
			Signatures:      []a2a.AgentCardSignature{{Protected: "eyJhbGciOiJFUzI1NiJ9", Signature: "c2ln", Header: map[string]any{"kid": "k1"}}},
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			raw, err := json.Marshal(c)
			require.NoError(t, err)
			parsed, err := card.Parse(raw)
			require.NoError(t, err, "%s", raw)
			assert.Equal(t, c.Name, parsed.Name)
			assert.Equal(t, c.Version, parsed.Version)
			assert.Len(t, parsed.Skills, len(c.Skills))
			assert.Len(t, parsed.Signatures, len(c.Signatures))
		})
	}

	// What a2a-go writes for unset fields, checked here so the cases above stay meaningful.
	raw, err := json.Marshal(cases["every optional string empty, nil lists"])
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(raw, &m))
	assert.Equal(t, "", m["version"])
	assert.Equal(t, "", m["protocolVersion"])
	assert.Equal(t, "", m["description"])
	assert.Contains(t, m, "defaultInputModes")
	assert.Nil(t, m["defaultInputModes"])
	assert.Nil(t, m["skills"].([]any)[0].(map[string]any)["tags"])
}

// The sample agent cards of the A2A specification itself: v0.3.0 §5.7 (url, preferredTransport,
// additionalInterfaces) and v1.0.1 §8.5 (supportedInterfaces), copied unchanged into testdata/
// from github.com/a2aproject/A2A docs/specification.md at those tags.
func TestParseSpecificationSampleCards(t *testing.T) {
	for _, f := range []string{"spec-v0.3.0-sample.json", "spec-v1.0.1-sample.json"} {
		t.Run(f, func(t *testing.T) {
			raw, err := os.ReadFile(filepath.Join("testdata", f))
			require.NoError(t, err)
			c, err := card.Parse(raw)
			require.NoError(t, err)
			assert.Equal(t, "GeoSpatial Route Planner Agent", c.Name)
			assert.Equal(t, "1.2.0", c.Version)
			assert.Len(t, c.Skills, 2)
			assert.Len(t, c.Signatures, 1)
			assert.ElementsMatch(t, []string{"maps", "routing", "navigation", "directions", "traffic", "customization", "visualization", "cartography"}, c.SkillTags())
		})
	}
}

// Unset and empty are the same thing for every field, as in ProtoJSON: a missing, null or empty
// protocolVersion, version or description is accepted alike; a missing, null or empty name is
// rejected alike.
func TestUnsetAndEmptyAreTheSame(t *testing.T) {
	base := func() map[string]any {
		return map[string]any{
			"name": "A", "url": "http://a:8080", "capabilities": map[string]any{},
			"version": "1", "description": "d", "protocolVersion": "0.3.0",
			"defaultInputModes": []any{"text"}, "defaultOutputModes": []any{"text"}, "skills": []any{},
		}
	}
	unset := map[string]func(m map[string]any, f string){
		"absent": func(m map[string]any, f string) { delete(m, f) },
		"null":   func(m map[string]any, f string) { m[f] = nil },
		"empty": func(m map[string]any, f string) {
			if _, isList := m[f].([]any); isList {
				m[f] = []any{}
			} else {
				m[f] = ""
			}
		},
	}
	for _, f := range []string{"protocolVersion", "version", "description", "defaultInputModes", "defaultOutputModes", "skills"} {
		for how, apply := range unset {
			m := base()
			apply(m, f)
			_, err := card.Parse(mustJSON(t, m))
			assert.NoError(t, err, "%s %s", f, how)
		}
	}
	for _, f := range []string{"name", "url"} {
		for how, apply := range unset {
			m := base()
			apply(m, f)
			_, err := card.Parse(mustJSON(t, m))
			var ie *card.InvalidError
			if assert.ErrorAs(t, err, &ie, "%s %s", f, how) {
				assert.Equal(t, f, ie.Field)
				assert.Equal(t, f+": required", err.Error())
			}
		}
	}
}

func TestTextCopiedOutOfACardIsBounded(t *testing.T) {
	long := make([]byte, 100_000)
	for i := range long {
		long[i] = 'x'
	}
	// An "é" across the cut (MaxNameBytes minus the 3 bytes of "…"): the cut backs off to its start.
	long[card.MaxNameBytes-4] = 0xc3
	long[card.MaxNameBytes-3] = 0xa9
	m := map[string]any{
		"name": string(long), "version": string(long), "description": string(long),
		"url": "http://a:8080", "capabilities": map[string]any{},
		"skills": []any{map[string]any{"id": string(long), "name": string(long), "tags": []any{string(long)}}},
	}
	c, err := card.Parse(mustJSON(t, m))
	require.NoError(t, err)
	for _, s := range []string{c.Name, c.Version, c.Skills[0].ID, c.Skills[0].Name, c.Skills[0].Tags[0]} {
		assert.LessOrEqual(t, len(s), card.MaxNameBytes)
		assert.True(t, utf8.ValidString(s))
		assert.Contains(t, s, "…")
	}
	assert.LessOrEqual(t, len(c.Description), card.MaxDescriptionBytes)
	assert.Equal(t, "xé", card.Truncate("xé", 3), "fits: unchanged")
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}
