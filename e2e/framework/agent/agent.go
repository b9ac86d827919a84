// Package agent is the stand-in agent of the e2e suite's identity flow: an HTTP server that
// reports what it received (which pod, which headers), and that calls another service on request,
// passing on the Authorization header it was called with, as an agent calling a tool or another
// agent does. On the local cluster the test kubelet runs it as the e2e test binary re-executed
// (podrunner); on kind it is the image of cmd/kagenti-e2e-agent.
package agent

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

// Report is what the stand-in agent (or the host's echo server) answers.
type Report struct {
	Pod     string      `json:"pod"`
	Headers http.Header `json:"headers"`
}

// CallResult is what the stand-in agent answers to /call: the status and body of its own request.
type CallResult struct {
	Status int    `json:"status"`
	Body   string `json:"body"`
}

// Main serves until the listener fails: / answers a Report, /call?url=&host= makes the call, and
// /.well-known/agent-card.json serves $AGENT_CARD when it is set.
func Main() int {
	mux := http.NewServeMux()
	mux.HandleFunc("/call", call)
	if card := os.Getenv("AGENT_CARD"); card != "" {
		// The A2A agent card, for agentcard to fetch (kind's attested-fetch test).
		mux.HandleFunc("/.well-known/agent-card.json", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, card)
		})
	}
	mux.Handle("/", ReportHandler(os.Getenv("POD_NAME")))
	srv := &http.Server{Addr: os.Getenv("AGENT_LISTEN"), Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(os.Stderr, "agent %s listening on %s\n", os.Getenv("POD_NAME"), srv.Addr)
	if err := srv.ListenAndServe(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// ReportHandler answers every request with a Report naming pod and the request's headers.
func ReportHandler(pod string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(Report{Pod: pod, Headers: r.Header})
	})
}

// call makes GET ?url= with Host ?host= and the caller's Authorization header. Its
// connection is the agent's own: in the pod, proxy-init's rules send it to the outbound proxy.
func call(w http.ResponseWriter, r *http.Request) {
	req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, r.URL.Query().Get("url"), nil)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	req.Host = r.URL.Query().Get("host")
	req.Header.Set("Authorization", r.Header.Get("Authorization"))
	var res CallResult
	resp, err := (&http.Client{Timeout: 20 * time.Second}).Do(req)
	if err != nil {
		res.Body = err.Error()
	} else {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		res.Status, res.Body = resp.StatusCode, string(b)
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(res)
}
