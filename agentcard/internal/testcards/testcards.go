// Package testcards builds A2A agent cards for tests and the local sample.
package testcards

import (
	"encoding/json"
	"fmt"
)

// Weather returns a valid A2A v0.3 card for the weather agent, with the given version.
func Weather(version string) []byte {
	return Must(map[string]any{
		"protocolVersion":    "0.3.0",
		"name":               "Weather Intelligence Agent",
		"description":        "Weather forecasts and climate data",
		"url":                "http://weather-agent.agents.svc.cluster.local:8080",
		"version":            version,
		"capabilities":       map[string]any{"streaming": true},
		"defaultInputModes":  []string{"text/plain"},
		"defaultOutputModes": []string{"application/json"},
		"skills": []map[string]any{
			{"id": "get_forecast", "name": "Get forecast", "description": "Weather forecast for a location", "tags": []string{"weather", "forecast"}},
			{"id": "get_climate_data", "name": "Get climate data", "description": "Historical climate data", "tags": []string{"climate"}},
		},
	})
}

// Named returns a valid card with the given name and version.
func Named(name, version string) []byte {
	var m map[string]any
	_ = json.Unmarshal(Weather(version), &m)
	m["name"] = name
	return Must(m)
}

// Must marshals v or panics.
func Must(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("marshal: %v", err))
	}
	return b
}
