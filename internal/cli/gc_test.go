package cli

import (
	"runtime/debug"
	"testing"

	"github.com/spf13/cobra"
)

// TestTuneGC: serve, work and bench (and their subcommands) raise GOGC
// unless GOGC or GOMEMLIMIT is set; other commands leave the collector
// alone.
func TestTuneGC(t *testing.T) {
	root := (&app{}).rootCmd()
	find := func(args ...string) *cobra.Command {
		c, _, err := root.Find(args)
		if err != nil {
			t.Fatalf("find %v: %v", args, err)
		}
		return c
	}
	none := func(string) string { return "" }
	cases := []struct {
		args []string
		env  func(string) string
		want bool
	}{
		{[]string{"serve"}, none, true},
		{[]string{"work"}, none, true},
		{[]string{"bench"}, none, true},
		{[]string{"bench", "ordering"}, none, true},
		{[]string{"enqueue"}, none, false},
		{[]string{"tasks", "list"}, none, false},
		{[]string{"migrate"}, none, false},
		{nil, none, false}, // the root itself
		{[]string{"serve"}, func(k string) string { return map[string]string{"GOGC": "200"}[k] }, false},
		{[]string{"work"}, func(k string) string { return map[string]string{"GOMEMLIMIT": "1GiB"}[k] }, false},
	}
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	for _, c := range cases {
		debug.SetGCPercent(100)
		got := tuneGC(find(c.args...), c.env)
		after := debug.SetGCPercent(100)
		if got != c.want {
			t.Errorf("%v: tuneGC = %v, want %v", c.args, got, c.want)
		}
		if want := map[bool]int{true: longRunningGCPercent, false: 100}[c.want]; after != want {
			t.Errorf("%v: GOGC is %d afterwards, want %d", c.args, after, want)
		}
	}
}
