// Package member is the member cluster's federation agent: it keeps the exported, verified
// AgentCards of its cluster in a revisioned log and streams the log to the hub over one outbound
// mutual-TLS gRPC stream, resuming where the hub stopped.
package member

import (
	"bytes"
	"cmp"
	"slices"
	"sync"
	"time"

	"github.com/kagenti/platform/agentcard/internal/federation/wire"
)

type key struct{ namespace, name string }

type logEntry struct {
	rev int64
	// up is nil for a tombstone (a card withdrawn after the hub may have seen it).
	up *wire.Upsert
}

// Log is the member's exported cards, each with the revision it last changed at. Revisions
// increase within one epoch (one run of the agent).
type Log struct {
	mu      sync.Mutex
	rev     int64
	entries map[key]*logEntry
	changed chan struct{}
}

// NewLog returns an empty log.
func NewLog() *Log { return &Log{entries: map[key]*logEntry{}, changed: make(chan struct{}, 1)} }

// Changed is signalled after Put or Remove changed the log.
func (l *Log) Changed() <-chan struct{} { return l.changed }

func (l *Log) notify() {
	select {
	case l.changed <- struct{}{}:
	default:
	}
}

// Put records a card to publish; the same card again is no change.
func (l *Log) Put(namespace, name string, card []byte, spiffeID string, verifiedAt time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := key{namespace, name}
	if e := l.entries[k]; e != nil && e.up != nil && bytes.Equal(e.up.Card, card) && e.up.SpiffeID == spiffeID {
		return
	}
	l.rev++
	l.entries[k] = &logEntry{rev: l.rev, up: &wire.Upsert{Revision: l.rev, Namespace: namespace, Name: name, Card: card, SpiffeID: spiffeID, VerifiedAt: verifiedAt.UTC()}}
	l.notify()
}

// Remove withdraws a card, if it was published.
func (l *Log) Remove(namespace, name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := key{namespace, name}
	if e := l.entries[k]; e == nil || e.up == nil {
		return
	}
	l.rev++
	l.entries[k] = &logEntry{rev: l.rev}
	l.notify()
}

// Since returns the frames for every change after rev, in revision order, and the log's head
// revision. full (the hub holds nothing of this epoch) sends the live cards only.
func (l *Log) Since(rev int64, full bool) ([]wire.MemberFrame, int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	type item struct {
		k key
		e *logEntry
	}
	var items []item
	for k, e := range l.entries {
		if e.rev > rev && (e.up != nil || !full) {
			items = append(items, item{k, e})
		}
	}
	slices.SortFunc(items, func(a, b item) int { return cmp.Compare(a.e.rev, b.e.rev) })
	frames := make([]wire.MemberFrame, 0, len(items))
	for _, it := range items {
		if it.e.up != nil {
			frames = append(frames, wire.MemberFrame{Upsert: it.e.up})
		} else {
			frames = append(frames, wire.MemberFrame{Delete: &wire.Delete{Revision: it.e.rev, Namespace: it.k.namespace, Name: it.k.name}})
		}
	}
	return frames, l.rev
}

// Head is the last revision.
func (l *Log) Head() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rev
}

// Compact forgets the tombstones the hub acknowledged.
func (l *Log) Compact(acked int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, e := range l.entries {
		if e.up == nil && e.rev <= acked {
			delete(l.entries, k)
		}
	}
}

// Len is the number of live cards.
func (l *Log) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, e := range l.entries {
		if e.up != nil {
			n++
		}
	}
	return n
}
