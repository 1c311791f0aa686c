package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/internal/testdb"
)

// TestEventStreamSurvivesPostgresRestart: an SSE stream of the event log
// stays open through a restart of its Postgres server (it used to end, so
// a client saw the connection drop) and goes on after the last event it
// sent: every event enqueued after the restart arrives on the same
// connection, none twice.
func TestEventStreamSurvivesPostgresRestart(t *testing.T) {
	t.Parallel()
	pg := testdb.OwnPostgres(t)
	b := setup(t, pg.URL, setupOpts{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", b.ts.URL+"/v1/events/stream?stream=queue.follow", nil)
	req.Header.Set("Authorization", "Bearer "+b.secret[api.RoleViewer])
	resp, err := b.ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("stream: %d", resp.StatusCode)
	}
	events := make(chan backstop.Event, 100)
	go func() {
		defer close(events)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			var e backstop.Event
			if err := json.Unmarshal([]byte(data), &e); err != nil {
				e.Subject = "unreadable: " + data
			}
			events <- e
		}
	}()
	var got []string
	receive := func(n int) {
		t.Helper()
		deadline := time.After(60 * time.Second)
		for len(got) < n {
			select {
			case e, ok := <-events:
				if !ok {
					t.Fatalf("the stream ended after %d events", len(got))
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
				_, err := b.lib.Enqueue(context.Background(), backstop.EnqueueParams{ID: fmt.Sprintf("f%02d", i), Queue: "follow", Kind: "k"})
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
			t.Fatalf("event %d is %s, want %s (all: %v)", i, id, want, got)
		}
	}
}
