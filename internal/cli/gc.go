package cli

import (
	"runtime/debug"

	"github.com/spf13/cobra"
)

// Long-running commands (serve, work, bench and their subcommands) move
// many small short-lived objects per task; the default collector (GOGC=100)
// then spends a good part of the process's CPU collecting them, CPU that a
// database on the same machine would rather have. Unless the user chose
// the collector's settings (GOGC or GOMEMLIMIT set), these commands run it
// at GOGC=400: fewer collections, for a peak heap of about five times the
// live one instead of two. The library itself leaves the collector alone.
const longRunningGCPercent = 400

// longRunningCommands are the top-level commands tuneGC applies to.
var longRunningCommands = map[string]bool{"serve": true, "work": true, "bench": true}

// tuneGC sets the long-running collector setting when cmd is (under) a
// long-running command and the environment sets neither GOGC nor
// GOMEMLIMIT. It reports whether it did.
func tuneGC(cmd *cobra.Command, getenv func(string) string) bool {
	top := cmd
	for top.HasParent() && top.Parent().HasParent() {
		top = top.Parent()
	}
	if !top.HasParent() || !longRunningCommands[top.Name()] {
		return false
	}
	if getenv("GOGC") != "" || getenv("GOMEMLIMIT") != "" {
		return false
	}
	debug.SetGCPercent(longRunningGCPercent)
	return true
}
