package main

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/kagenti/platform/pkg/configmap/appprobe"
	"github.com/kagenti/platform/pkg/configmap/contract"
	"github.com/kagenti/platform/tokenexchange/internal/authbridge/sidecar"
)

const sidecarLong = `sidecar runs the named long-running roles (register, inbound, outbound: a non-empty set, each
at most once) in one process: the injector's one container for them, instead of one container and
one Go runtime each. The roles share the configuration (one watch of --config-dir) and keep their own
status servers on their own ports (the tokenexchange controller reads /status there).

register starts first; inbound and outbound start once it is ready (its /readyz), as the separate
containers did behind its startup probe. The aggregate status server (--status-address) answers
/healthz with 200 while no role has stopped and /readyz with 200 when every role is ready; both
bodies give each role's state. A role that fails ends the process with an error naming it.`

// waitPoll is how often a role that waits for register asks whether register is ready.
const waitPoll = 100 * time.Millisecond

func newSidecarCommand(common *commonFlags) *cobra.Command {
	var (
		statusAddr string
		reg        registerOptions
		in         inboundOptions
		out        outboundOptions
	)
	cmd := &cobra.Command{
		Use:   contract.AuthbridgeSidecarCommand + " <role>...",
		Short: "the long-running roles (register, inbound, outbound) of one container in one process",
		Long:  sidecarLong,
		Args: func(_ *cobra.Command, args []string) error {
			_, err := parseRoles(args)
			return err
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			names, err := parseRoles(args)
			if err != nil {
				return err
			}
			prepare := map[string]prepareRole{"register": reg.prepare, "inbound": in.prepare, "outbound": out.prepare}
			return runSidecar(cmd.Context(), common, statusAddr, names, prepare)
		},
	}
	f := cmd.Flags()
	f.StringVar(&statusAddr, "status-address", adminAddress(sidecarStatusPort), "address of the aggregate /healthz and /readyz of all the roles")
	reg.addFlags(f, "register-status-address")
	in.addFlags(f, "inbound-status-address")
	out.addFlags(f, "outbound-status-address")
	return cmd
}

// parseRoles checks the sidecar's arguments and returns the roles in the order they start
// (contract.SidecarRoles).
func parseRoles(args []string) ([]string, error) {
	if len(args) == 0 {
		return nil, fmt.Errorf("no role given: name one or more of %s", strings.Join(contract.SidecarRoles, ", "))
	}
	seen := map[string]bool{}
	for _, a := range args {
		if !slices.Contains(contract.SidecarRoles, a) {
			return nil, fmt.Errorf("unknown role %q: the roles are %s", a, strings.Join(contract.SidecarRoles, ", "))
		}
		if seen[a] {
			return nil, fmt.Errorf("role %q is named twice", a)
		}
		seen[a] = true
	}
	var roles []string
	for _, r := range contract.SidecarRoles {
		if seen[r] {
			roles = append(roles, r)
		}
	}
	return roles, nil
}

// runSidecar runs the roles in one process until ctx ends or one of them fails.
func runSidecar(ctx context.Context, common *commonFlags, statusAddr string, names []string, prepare map[string]prepareRole) error {
	log, err := common.baseLogger()
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	// The configuration's lines are every role's; each role's own lines name it.
	cfg, err := common.config(log.With(zap.Strings("roles", names)))
	if err != nil {
		return err
	}
	states := make([]*roleState, len(names))
	for i, n := range names {
		states[i] = &roleState{name: n}
	}
	return runRoles(ctx, common, cfg, statusAddr, states, prepare, log)
}

// runRoles runs the roles on one configuration, register first, with the aggregate status server
// on statusAddr, until ctx ends or one of them fails. log names no role.
func runRoles(ctx context.Context, common *commonFlags, cfg *sidecar.Config, statusAddr string, states []*roleState,
	prepare map[string]prepareRole, log *zap.Logger) error {
	client := idpClient() // one connection pool to the identity provider for all the roles
	var register *roleState
	if states[0].name == "register" {
		register = states[0]
	}

	g, ctx := errgroup.WithContext(ctx)
	names := make([]string, len(states))
	for i, st := range states {
		names[i] = st.name
	}
	common.startTracing(ctx, g, names, log)
	g.Go(func() error { cfg.Run(ctx, common.poll); return nil })
	g.Go(func() error {
		if err := sidecar.Serve(ctx, statusAddr, aggregateHandler(states, cfg.AppProbes()), log); err != nil {
			return fmt.Errorf("aggregate status server on %s: %w", statusAddr, err)
		}
		return nil
	})
	for _, st := range states {
		g.Go(func() error {
			rlog := log.With(zap.String("role", st.name))
			if register != nil && st != register {
				st.setWaiting("register")
				if !register.waitReady(ctx) {
					return nil // ending: the process stops
				}
			}
			r, err := prepare[st.name](common, cfg, client, rlog)
			if err != nil {
				st.stop()
				return fmt.Errorf("role %s: %w", st.name, err)
			}
			st.run(func() sidecar.Status { return sidecar.StatusOf(r.name, cfg, r.readiness, r.refusal) }, r.liveness)
			err = serveRole(ctx, r, cfg, rlog)
			st.stop()
			if err != nil {
				return fmt.Errorf("role %s: %w", st.name, err)
			}
			return nil
		})
	}
	return g.Wait()
}

// roleState is where a role of the sidecar stands: waiting for another role, running (with the
// status it reports) or stopped.
type roleState struct {
	name string

	mu       sync.Mutex
	waitsFor string
	status   func() sidecar.Status // set while running
	live     sidecar.Liveness      // set while running; nil: alive while running
	stopped  bool
}

func (s *roleState) setWaiting(other string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.waitsFor = other
}

func (s *roleState) run(status func() sidecar.Status, live sidecar.Liveness) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.waitsFor, s.status, s.live = "", status, live
}

func (s *roleState) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.status, s.live, s.stopped = nil, nil, true
}

// state reports whether the role is live (not stopped, no serving loop wedged) and ready, and a
// line that says so.
func (s *roleState) state() (live, ready bool, line string) {
	s.mu.Lock()
	status, liveness, waitsFor, stopped := s.status, s.live, s.waitsFor, s.stopped
	s.mu.Unlock()
	var dead []string
	if liveness != nil {
		dead = liveness()
	}
	switch {
	case stopped:
		return false, false, s.name + ": stopped"
	case len(dead) > 0:
		return false, false, s.name + ": not alive: " + strings.Join(dead, "; ")
	case status == nil && waitsFor != "":
		return true, false, s.name + ": waiting for " + waitsFor + " to be ready"
	case status == nil:
		return true, false, s.name + ": starting"
	}
	st := status()
	if !st.Ready {
		return true, false, s.name + ": not ready: " + strings.Join(st.NotReady, "; ")
	}
	return true, true, s.name + ": ready"
}

// waitReady blocks until the role runs and is ready (true) or ctx ends (false).
func (s *roleState) waitReady(ctx context.Context) bool {
	t := time.NewTicker(waitPoll)
	defer t.Stop()
	for {
		if _, ready, _ := s.state(); ready {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
}

// aggregateHandler serves /healthz (200 iff no role has stopped and none has a wedged serving
// loop) and /readyz (200 iff every role is ready) for the roles of one process; each body has a
// line per role with its state.
func aggregateHandler(states []*roleState, appProbes map[string]appprobe.AppProbe) http.Handler {
	answer := func(w http.ResponseWriter, readiness bool) {
		ok := true
		var body strings.Builder
		for _, st := range states {
			live, ready, line := st.state()
			if readiness {
				ok = ok && ready
			} else {
				ok = ok && live
			}
			body.WriteString(line + "\n")
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_, _ = w.Write([]byte(body.String()))
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { answer(w, false) })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) { answer(w, true) })
	// The agent's own probes, rewritten by the injector to this port (issue 27).
	mux.Handle("GET "+contract.AppProbePathPrefix, sidecar.AppProbeHandler(appProbes))
	return mux
}
