package sidecar

import (
	"fmt"
	"net"
	"sync"
	"time"
)

// Liveness lists why a role is not alive (an empty list when it is): a serving loop wedged or
// ended. /healthz answers 503 with these reasons.
type Liveness func() []string

// DefaultStall is how long an accept loop may stay out of Accept before it counts as wedged. A
// healthy loop hands each connection off and is back in Accept within microseconds (net/http
// sleeps at most 1 s after a temporary accept error).
const DefaultStall = 10 * time.Second

// Loops tracks the accept loops of a role. A loop that waits in Accept is alive however long it
// waits (no traffic is no fault); a loop that has been out of Accept for longer than Stall is
// wedged (a handler run inline, a deadlock); a loop whose listener failed or closed has ended.
type Loops struct {
	Stall time.Duration
	now   func() time.Time

	mu    sync.Mutex
	loops []*loop
}

type loop struct {
	name     string
	inAccept bool
	since    time.Time // of the latest entry into or exit from Accept
	lastErr  error     // of the latest Accept, nil when it returned a connection
	closed   bool
}

// NewLoops returns a tracker with DefaultStall.
func NewLoops() *Loops { return &Loops{Stall: DefaultStall, now: time.Now} }

// Listener returns ln with its Accept calls tracked as the loop name (e.g. "inbound proxy on
// :8080"). The loop is live from here on: until its first Accept it counts as out of Accept.
func (l *Loops) Listener(name string, ln net.Listener) net.Listener {
	l.mu.Lock()
	defer l.mu.Unlock()
	lp := &loop{name: name, since: l.now()}
	l.loops = append(l.loops, lp)
	return &trackedListener{Listener: ln, loops: l, loop: lp}
}

// Check is the Liveness of the tracked loops.
func (l *Loops) Check() []string {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	var out []string
	for _, lp := range l.loops {
		switch {
		case lp.closed:
			out = append(out, lp.name+": the listener was closed")
		case lp.inAccept:
		case now.Sub(lp.since) > l.Stall:
			reason := fmt.Sprintf("%s: wedged, not accepting connections for %s", lp.name, now.Sub(lp.since).Round(time.Second))
			if lp.lastErr != nil {
				reason += fmt.Sprintf(" (its last accept failed: %v)", lp.lastErr)
			}
			out = append(out, reason)
		}
	}
	return out
}

type trackedListener struct {
	net.Listener
	loops *Loops
	loop  *loop
}

func (t *trackedListener) Accept() (net.Conn, error) {
	t.loops.mu.Lock()
	t.loop.inAccept, t.loop.since = true, t.loops.now()
	t.loops.mu.Unlock()
	c, err := t.Listener.Accept()
	t.loops.mu.Lock()
	t.loop.inAccept, t.loop.since, t.loop.lastErr = false, t.loops.now(), err
	t.loops.mu.Unlock()
	return c, err
}

func (t *trackedListener) Close() error {
	t.loops.mu.Lock()
	t.loop.closed = true
	t.loops.mu.Unlock()
	return t.Listener.Close()
}
