package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/testwait"
)

// TestREADMEOrderingExample runs the README's ordered enqueue as written,
// on the default database of an empty directory and through a `serve
// --dev`, with no configuration: either way the task keeps its key and
// sequence, `tasks show` says why it waits (table and JSON), and `backstop
// work --queue results` runs it — one ordering rule for both paths (an
// undeclared queue is ordered with the default settings).
func TestREADMEOrderingExample(t *testing.T) {
	t.Parallel()
	var line string
	for _, b := range codeBlocks(t, "README.md", "sh") {
		for _, l := range b {
			if strings.HasPrefix(l, "backstop enqueue --queue results") && strings.Contains(l, "--ordering-key") {
				cmd, _, _ := strings.Cut(l, "#") // the command as typed, without its comment
				line = strings.TrimSpace(cmd)
			}
		}
	}
	if line == "" {
		t.Fatal("README has no ordered enqueue (backstop enqueue --queue results … --ordering-key)")
	}
	for _, via := range []string{"database", "server"} {
		t.Run(via, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			env := shellEnv(binDir(t))
			server := ""
			if via == "server" {
				r, errb, stop := background(t, dir, env, "backstop serve --dev --addr 127.0.0.1:0")
				printed := readUntil(t, r, "serving")
				_, rest, _ := strings.Cut(printed[len(printed)-1], "serving ")
				url, _, _ := strings.Cut(rest, " ")
				server = " --server " + url
				t.Cleanup(func() {
					if code := stop(syscall.SIGTERM); code != 0 {
						t.Errorf("serve: exit %d after SIGTERM\n%s", code, errb.String())
					}
				})
			}
			out, errs, code := sh(t, dir, env, line+server)
			if code != 0 {
				t.Fatalf("%s: exit %d\n%s%s", line, code, out, errs)
			}
			id := strings.TrimSpace(out)

			// Waiting, it says for what.
			out, errs, code = sh(t, dir, env, "backstop tasks show "+id+server)
			if code != 0 {
				t.Fatalf("tasks show: exit %d\n%s%s", code, out, errs)
			}
			for _, want := range []string{"state:", "buffered", "ordering_key:", "sub-42", "sequence:", "1700000000000",
				"ordering_wait:", `held: waiting for ordering admission of key "sub-42"`, `queue "results"`} {
				if !strings.Contains(out, want) {
					t.Errorf("tasks show lacks %q:\n%s", want, out)
				}
			}
			out, errs, code = sh(t, dir, env, "backstop tasks show -o json "+id+server)
			var v struct {
				State        string `json:"state"`
				OrderingKey  string `json:"ordering_key"`
				Sequence     int64  `json:"sequence"`
				OrderingWait string `json:"ordering_wait"`
			}
			if code != 0 || json.Unmarshal([]byte(out), &v) != nil {
				t.Fatalf("tasks show -o json: exit %d\n%s%s", code, out, errs)
			}
			if v.State != "buffered" || v.OrderingKey != "sub-42" || v.Sequence != 1700000000000 ||
				!strings.HasPrefix(v.OrderingWait, "held: ") {
				t.Errorf("tasks show -o json: %+v", v)
			}

			// A worker of the queue, with no configuration, runs it.
			_, errb, stop := background(t, dir, env, "backstop work --queue results"+server+" -- true")
			_, c := storeClient(t, "sqlite://"+filepath.Join(dir, "backstop.db"))
			testwait.For(t, "the ordered task to succeed", func() bool {
				tk, err := c.Get(context.Background(), id)
				return err == nil && tk.State == backstop.StateSucceeded
			})
			if code := stop(syscall.SIGTERM); code != 0 {
				t.Errorf("work: exit %d after SIGTERM\n%s", code, errb.String())
			}
			tk, err := c.Get(context.Background(), id)
			if err != nil || tk.OrderingKey != "sub-42" || tk.Sequence != 1700000000000 || tk.OrderingWait != "" {
				t.Errorf("after the run: %+v %v", tk, err)
			}
		})
	}
}
