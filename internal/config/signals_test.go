package config

import (
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestWorkersSection: workers is a mapping (stale_after, run) or, as
// before, the list of run alone; stale_after reaches the library, from the
// file or BACKSTOP_WORKERS_STALE_AFTER; errors name the key in the form the
// file used.
func TestWorkersSection(t *testing.T) {
	for _, tc := range []struct {
		yaml  string
		stale time.Duration
		run   int
	}{
		{"workers:\n  stale_after: 5s\n  run:\n    - queue: q\n      command: [x]\n", 5 * time.Second, 1},
		{"workers:\n  - queue: q\n    command: [x]\n", time.Minute, 1},
		{"workers: {stale_after: 2m}\n", 2 * time.Minute, 0},
		{"", time.Minute, 0},
	} {
		c, err := Parse([]byte(tc.yaml))
		if err == nil {
			err = c.Validate()
		}
		if err != nil {
			t.Fatalf("%q: %v", tc.yaml, err)
		}
		if got := c.Library().WorkerStaleAfter; cmpDur(got, tc.stale) || len(c.Effective().Workers.Run) != tc.run {
			t.Errorf("%q: stale after %s, %d run; want %s, %d", tc.yaml, got, len(c.Workers.Run), tc.stale, tc.run)
		}
	}
	for _, tc := range []struct{ yaml, want string }{
		{"workers:\n  stale_after: 10ms\n", "workers.stale_after: 10ms: must be at least 1s"},
		{"workers:\n  stale_after: soon\n", `workers.stale_after: "soon" is not a duration`},
		{"workers:\n  stale: 1m\n", `unknown key "stale" in workers`},
		{"workers:\n  run:\n    - queue: q\n", "workers.run[0].command: is required"},
		{"workers:\n  - queue: q\n", "workers[0].command: is required"},
		{"workers: 3\n", "workers"},
	} {
		c, err := Parse([]byte(tc.yaml))
		if err == nil {
			err = c.Validate()
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want an error containing %q", tc.yaml, err, tc.want)
		}
	}
	c := &Config{}
	if err := c.ApplyEnv([]string{"BACKSTOP_WORKERS_STALE_AFTER=90s"}); err != nil || c.Library().WorkerStaleAfter != 90*time.Second {
		t.Fatalf("BACKSTOP_WORKERS_STALE_AFTER: %v %s", err, c.Library().WorkerStaleAfter)
	}
	if err := (&Config{}).ApplyEnv([]string{"BACKSTOP_WORKERS_STALE"}); err != nil {
		t.Fatal(err) // no '=': not a variable
	}
	if err := (&Config{}).ApplyEnv([]string{"BACKSTOP_WORKERS_STALENESS=1m"}); err == nil {
		t.Fatal("an unknown BACKSTOP_WORKERS_ variable was accepted")
	}
}

// cmpDur: the library's zero means its default (1m).
func cmpDur(got, want time.Duration) bool {
	if got == 0 {
		got = time.Minute
	}
	return got != want
}

// TestLogLevel: log.level and BACKSTOP_LOG_LEVEL take debug, info, warn or
// error; anything else is an error naming the key or the variable.
func TestLogLevel(t *testing.T) {
	c, err := Parse([]byte("log:\n  level: warn\n"))
	if err != nil || c.Validate() != nil {
		t.Fatal(err, c.Validate())
	}
	if l, _ := ParseLogLevel(c.Log.Level); l != slog.LevelWarn || c.Effective().Log.Level != "warn" {
		t.Fatalf("log.level warn: %v", l)
	}
	c, _ = Parse([]byte("log:\n  level: loud\n"))
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), `log.level: "loud": want one of debug, info, warn, error`) {
		t.Fatalf("log.level loud: %v", err)
	}
	if _, err := Parse([]byte("log:\n  lvl: warn\n")); err == nil || !strings.Contains(err.Error(), `unknown key "lvl" in log`) {
		t.Fatalf("log.lvl: %v", err)
	}
	c = &Config{}
	if err := c.ApplyEnv([]string{"BACKSTOP_LOG_LEVEL=DEBUG"}); err != nil || c.Log.Level != "DEBUG" {
		t.Fatalf("BACKSTOP_LOG_LEVEL=DEBUG: %v %q", err, c.Log.Level)
	}
	if err := (&Config{}).ApplyEnv([]string{"BACKSTOP_LOG_LEVEL=loud"}); err == nil || !strings.Contains(err.Error(), "BACKSTOP_LOG_LEVEL") {
		t.Fatalf("BACKSTOP_LOG_LEVEL=loud: %v", err)
	}
}

func FuzzParseLogLevel(f *testing.F) {
	for _, s := range []string{"", "debug", "INFO", " warn ", "warning", "error", "loud", "debug\x00", "ERR"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, err := ParseLogLevel(s)
		if err != nil {
			if !strings.Contains(err.Error(), "want one of") {
				t.Fatalf("%q: %v", s, err)
			}
			return
		}
		if l != slog.LevelDebug && l != slog.LevelInfo && l != slog.LevelWarn && l != slog.LevelError {
			t.Fatalf("%q: level %v", s, l)
		}
	})
}
