package main

import (
	"runtime/debug"
	"strconv"
)

// defaultGCPercent is the garbage collector's target when GOGC does not set one. agentcard's heap
// is mostly its caches (pods, AgentCards, per-pod sync state and cards), live as long as the
// process: at Go's default of 100 the heap grows to twice them between collections and the
// resident memory follows that peak; at 50, to one and a half times. At 1,000 AgentCards × 3 pods
// that is 56–58 MiB of RSS instead of 62–65 MiB, for about the same CPU in the first sync (docs/benchmarks.md);
// the collector runs twice as often on a heap that is mostly idle.
const defaultGCPercent = 50

// setGCPercent applies defaultGCPercent unless GOGC is set (the runtime has applied it). It
// returns where the target came from, for the log.
func setGCPercent(getenv func(string) string) string {
	if v := getenv("GOGC"); v != "" {
		return "GOGC=" + v + " set in the environment"
	}
	debug.SetGCPercent(defaultGCPercent)
	return "default " + strconv.Itoa(defaultGCPercent)
}
