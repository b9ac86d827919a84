package command

import (
	"runtime/debug"
	"strconv"
)

// SetGCPercent applies percent as the garbage collector's target unless GOGC is set (the runtime
// has applied it then). It returns where the target came from, for the log.
func SetGCPercent(percent int, getenv func(string) string) string {
	if v := getenv("GOGC"); v != "" {
		return "GOGC=" + v + " set in the environment"
	}
	debug.SetGCPercent(percent)
	return "default " + strconv.Itoa(percent)
}
