package execworker_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/execworker"
)

// FuzzParseProgress: a progress line is N/M with 0 <= N <= M and M >= 1,
// and what is accepted prints back as the same numbers.
func FuzzParseProgress(f *testing.F) {
	for _, s := range []string{"2/5", " 0 / 1 ", "5/5", "6/5", "-1/5", "1/0", "0/0", "1/", "/5", "a/b", "1/2/3", "", "99999999999999999999/1", "3/5\r"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, ok := execworker.ParseProgress(s)
		if !ok {
			if p != (backstop.Progress{}) {
				t.Fatalf("%q: refused but returned %+v", s, p)
			}
			return
		}
		if p.Completed < 0 || p.Total < 1 || p.Completed > p.Total {
			t.Fatalf("%q: accepted %+v", s, p)
		}
		if q, ok := execworker.ParseProgress(fmt.Sprintf("%d/%d", p.Completed, p.Total)); !ok || q != p {
			t.Fatalf("%q: %+v does not round-trip (%+v)", s, p, q)
		}
	})
}

func TestParseProgress(t *testing.T) {
	for s, want := range map[string]bool{"2/5": true, " 0 / 1 ": true, "5/5": true, "3/5\r": true,
		"6/5": false, "-1/5": false, "1/0": false, "0/0": false, "x": false, "1/2/3": false} {
		if _, ok := execworker.ParseProgress(s); ok != want {
			t.Errorf("ParseProgress(%q) ok = %v, want %v", s, ok, want)
		}
	}
}

// TestProgressFileRun: the last N/M line a program appends is the run's
// progress, reported live through the context's sink while the program
// runs; a flood of lines keeps only the newest; the file is fresh per run
// (an inherited BACKSTOP_PROGRESS_FILE is not passed on); bad lines and a
// progress file that is not a regular file are noted in the log, never
// fatal.
func TestProgressFileRun(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, script string
		want         *backstop.Progress
		note         string
	}{
		{name: "none", script: `true`},
		{name: "last line", script: `echo 1/3 >> "$F"; echo 3/3 >> "$F"`, want: &backstop.Progress{Completed: 3, Total: 3}},
		{name: "no newline", script: `printf 2/7 >> "$F"`, want: &backstop.Progress{Completed: 2, Total: 7}},
		{name: "bad line", script: `echo 1/2 >> "$F"; echo 5/2 >> "$F"`, want: &backstop.Progress{Completed: 1, Total: 2}, note: `line "5/2" is not N/M`},
		{name: "flood", script: `awk 'BEGIN { for (i = 1; i <= 50000; i++) print i "/50000" }' >> "$F"`,
			want: &backstop.Progress{Completed: 50000, Total: 50000}},
		{name: "a directory", script: `mkdir "$F"`, note: "is not a regular file"},
		{name: "rewritten", script: `echo 10/19 >> "$F"; sleep 0.1; echo 1/2 > "$F"`, want: &backstop.Progress{Completed: 1, Total: 2}},
	} {
		h := newHandler(t, execworker.Config{Command: shell(`F="$BACKSTOP_PROGRESS_FILE"; ` + tc.script),
			Env: []string{"PATH=" + os.Getenv("PATH"), execworker.ProgressFileEnv + "=/inherited"}, ProgressInterval: 20 * time.Millisecond})
		var (
			mu    sync.Mutex // the output's and the progress's goroutines both log
			seen  []backstop.Progress
			lines []string
		)
		ctx := backstop.ContextWithProgressSink(context.Background(), func(p backstop.Progress) { seen = append(seen, p) })
		ctx = backstop.ContextWithLogSink(ctx, func(_, line string) { mu.Lock(); lines = append(lines, line); mu.Unlock() })
		r := h.Run(ctx, testTask())
		if r.Err != nil {
			t.Fatalf("%s: %v", tc.name, r.Err)
		}
		switch {
		case tc.want == nil && r.Progress != nil, tc.want != nil && (r.Progress == nil || *r.Progress != *tc.want):
			t.Errorf("%s: progress %v, want %v", tc.name, r.Progress, tc.want)
		case tc.want != nil && (len(seen) == 0 || seen[len(seen)-1] != *tc.want):
			t.Errorf("%s: the sink saw %v, want it to end with %v", tc.name, seen, *tc.want)
		}
		log := strings.Join(lines, "\n")
		if tc.note != "" && !strings.Contains(log, tc.note) || tc.note == "" && strings.Contains(log, execworker.ProgressFileEnv) {
			t.Errorf("%s: log %q, want a note %q", tc.name, log, tc.note)
		}
	}
}
