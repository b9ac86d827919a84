package sidecar

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/kagenti/platform/tokenexchange/internal/authbridge/telemetry"
)

// Status is what GET /status returns: which configuration a role runs and whether it is ready.
// The tokenexchange controller reads it from each pod (docs/identity.md, "Status endpoint").
type Status struct {
	Role  string `json:"role"`
	Ready bool   `json:"ready"`
	// NotReady says why, when Ready is false.
	NotReady []string `json:"notReady,omitempty"`
	// ContentHash is the kagenti.io/content-hash of the ConfigMap content in effect; empty when
	// the role runs the injector's defaults alone.
	ContentHash string `json:"contentHash"`
	// ConfigHash identifies the resolved configuration in effect (defaults included).
	ConfigHash string    `json:"configHash"`
	LoadedAt   time.Time `json:"loadedAt"`
	// ConfigError is why the latest ConfigMap content was rejected (the previous one stays in effect).
	ConfigError string `json:"configError,omitempty"`
	// PendingRestart lists changed settings that take effect only when the pod is recreated.
	PendingRestart []string `json:"pendingRestart,omitempty"`
	// Refusal is set while the role refuses to act on its configuration for a reason that only a
	// person can remove (a registered client that belongs to another workload). The controller
	// reports it on the TokenExchange with Reason; NotReady says the same.
	Refusal *Refusal `json:"refusal,omitempty"`
}

// Refusal is a role's standing refusal: Reason is one of the Reason constants below (the
// controller maps each to a TokenExchange reason and ignores others), Message says what was
// refused and how to lift it.
type Refusal struct {
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// ReasonClientOwnedElsewhere: the register role found the client it would register under the
// configured name, owned by another workload or by no one it can tell, and left it untouched.
const ReasonClientOwnedElsewhere = "ClientOwnedElsewhere"

// Refusals reports a role's standing refusal, nil when there is none.
type Refusals func() *Refusal

// Readiness reports what, besides a valid configuration, a role still waits for (an empty list
// when it is ready).
type Readiness func() []string

// StatusOf assembles the status of role; readiness and refusal may be nil.
func StatusOf(role string, cfg *Config, readiness Readiness, refusal Refusals) Status {
	snap := cfg.Current()
	s := Status{
		Role:           role,
		ContentHash:    snap.ContentHash,
		ConfigHash:     snap.Config.Hash(),
		LoadedAt:       snap.LoadedAt.UTC().Truncate(time.Second),
		PendingRestart: cfg.PendingRestart(),
	}
	if err := cfg.Err(); err != nil {
		s.ConfigError = err.Error()
		s.NotReady = append(s.NotReady, "the latest configuration was rejected: "+err.Error())
	}
	if readiness != nil {
		s.NotReady = append(s.NotReady, readiness()...)
	}
	if refusal != nil {
		s.Refusal = refusal()
	}
	s.Ready = len(s.NotReady) == 0
	return s
}

// AdminHandler serves /healthz (alive: 200, else 503 with the reasons liveness gives, e.g. a
// wedged accept loop), /readyz (ready: 200, else 503 with the reasons), /status (JSON Status) and
// /metrics (the process's exchanges, decisions and calls: package telemetry).
// A nil liveness, readiness or refusal reports nothing.
func AdminHandler(role string, cfg *Config, readiness Readiness, refusal Refusals, liveness Liveness) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if liveness != nil {
			if reasons := liveness(); len(reasons) > 0 {
				w.WriteHeader(http.StatusServiceUnavailable)
				for _, r := range reasons {
					_, _ = w.Write([]byte(r + "\n"))
				}
				return
			}
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		s := StatusOf(role, cfg, readiness, refusal)
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if !s.Ready {
			w.WriteHeader(http.StatusServiceUnavailable)
			for _, r := range s.NotReady {
				_, _ = w.Write([]byte(r + "\n"))
			}
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.Handle("GET /metrics", telemetry.Default.Handler())
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(StatusOf(role, cfg, readiness, refusal))
	})
	return mux
}

// Serve serves h on addr until ctx ends, then shuts down gracefully.
func Serve(ctx context.Context, addr string, h http.Handler, log *zap.Logger) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	return ServeListener(ctx, ln, h, log)
}

// ServeListener is Serve on a listener the caller opened.
func ServeListener(ctx context.Context, ln net.Listener, h http.Handler, log *zap.Logger) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ErrorLog: zap.NewStdLog(log)}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := srv.Shutdown(shutdown)
	if e := <-done; !errors.Is(e, http.ErrServerClosed) && err == nil {
		err = e
	}
	return err
}
