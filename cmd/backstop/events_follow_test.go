package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/testdb"
	"github.com/backstophq/backstop/internal/testlog"
)

// TestEventsTailFollowSurvivesPostgresRestart: `events tail --follow`
// outlives a restart of its Postgres server (it used to exit 1 with
// "terminating connection due to administrator command"): it reconnects
// and prints every event enqueued after the restart, after the last one it
// printed, none twice.
func TestEventsTailFollowSurvivesPostgresRestart(t *testing.T) {
	t.Parallel()
	pg := testdb.OwnPostgres(t)
	c := remoteClient(t, pg.URL)
	tail := exec.Command(binary, "--db", pg.URL, "events", "tail", "--follow", "-o", "json", "--stream", "queue.follow", "--poll", "50ms")
	stdout, err := tail.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &testlog.Buffer{}
	tail.Stderr = stderr
	if err := tail.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	lines := make(chan backstop.Event, 100)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var e backstop.Event
			if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
				e.Subject = "unreadable line: " + sc.Text()
			}
			lines <- e
		}
		close(lines)
		exited <- tail.Wait()
	}()
	defer func() {
		_ = tail.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = tail.Process.Kill()
		}
		if t.Failed() {
			t.Logf("events tail stderr:\n%s", stderr.String())
		}
	}()
	var got []string
	receive := func(n int) {
		t.Helper()
		deadline := time.After(60 * time.Second)
		for len(got) < n {
			select {
			case e, ok := <-lines:
				if !ok {
					t.Fatalf("events tail exited after %d events: %v", len(got), <-exited)
				}
				got = append(got, e.Subject)
			case <-deadline:
				t.Fatalf("%d of %d events after a minute: %v", len(got), n, got)
			}
		}
	}
	enqueue := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			testdb.Retry(t, func() error {
				_, err := c.Enqueue(context.Background(), backstop.EnqueueParams{ID: fmt.Sprintf("f%02d", i), Queue: "follow", Kind: "k"})
				return err
			})
		}
	}
	enqueue(0, 3)
	receive(3)
	pg.Restart()
	enqueue(3, 6)
	receive(6)
	for i, id := range got {
		if want := fmt.Sprintf("f%02d", i); id != want {
			t.Fatalf("line %d is %s, want %s (all: %v)", i, id, want, got)
		}
	}
	select {
	case e, ok := <-lines:
		t.Fatalf("an extra line: %+v %v", e, ok)
	case <-time.After(300 * time.Millisecond):
	}
}
