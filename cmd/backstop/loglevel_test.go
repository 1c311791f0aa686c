package main

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/backstophq/backstop/internal/testwait"
)

// TestLogLevel: `serve` logs at the level --log-level names (over
// BACKSTOP_LOG_LEVEL), or else the one log.level names in --config: debug
// shows the API's read calls, warn hides serve's info lines. A bad level
// exits 2 naming the flag, the variable or the key, for serve, work and the
// CLI.
func TestLogLevel(t *testing.T) {
	t.Parallel()
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			db := st.url(t)
			addr := freeAddr(t)
			s := startServeProc(t, addr, []string{"BACKSTOP_LOG_LEVEL=error"},
				"--db", db, "serve", "--dev", "--addr", addr, "--log-level", "debug")
			resp, err := http.Get("http://" + addr + "/v1/openapi.json")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			testwait.For(t, "--log-level debug: a debug line for the API call", func() bool {
				return strings.Contains(s.log.String(), `"level":"DEBUG","msg":"api call"`)
			})

			cfg := filepath.Join(t.TempDir(), "backstop.yaml")
			if err := os.WriteFile(cfg, []byte("log:\n  level: warn\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			addr = freeAddr(t)
			s = startServeProc(t, addr, nil, "--db", db, "serve", "--dev", "--addr", addr, "--config", cfg)
			if resp, err := http.Get("http://" + addr + "/v1/openapi.json"); err == nil {
				resp.Body.Close()
			}
			if l := s.log.String(); strings.Contains(l, `"level":"INFO"`) || strings.Contains(l, `"level":"DEBUG"`) {
				t.Fatalf("log.level warn: serve logged below warn:\n%s", l)
			}
		})
	}

	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("log:\n  level: loud\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	db := "sqlite://" + filepath.Join(t.TempDir(), "bad.db")
	for _, tc := range []struct {
		env  []string
		args []string
		want string
	}{
		{nil, []string{"serve", "--log-level", "loud"}, "--log-level"},
		{nil, []string{"work", "--queue", "q", "--log-level", "loud", "--", "true"}, "--log-level"},
		{nil, []string{"tasks", "list", "--log-level", "verbose"}, "--log-level"},
		{[]string{"BACKSTOP_LOG_LEVEL=loud"}, []string{"tasks", "list"}, "BACKSTOP_LOG_LEVEL"},
		{[]string{"BACKSTOP_LOG_LEVEL=loud"}, []string{"serve", "--config", bad}, "BACKSTOP_LOG_LEVEL"},
		{nil, []string{"serve", "--config", bad}, "log.level"},
		{nil, []string{"work", "--queue", "q", "--config", bad, "--", "true"}, "log.level"},
	} {
		cmd := exec.Command(binary, append([]string{"--db", db}, tc.args...)...)
		cmd.Env = append(os.Environ(), tc.env...)
		out, err := cmd.CombinedOutput()
		code := -1
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		if code != 2 || !strings.Contains(string(out), tc.want) {
			t.Errorf("%v %v: exit %d, %q; want exit 2 naming %s", tc.env, tc.args, code, out, tc.want)
		}
	}
}
