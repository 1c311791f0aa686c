package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/internal/dburl"
)

// TestCLIListsOverBoundedServer: `tasks list` and `dlq list` print
// summaries (payload_size, no payload) on the database and over --server
// alike; --with-payload prints every payload, the remote side paging by
// cursor through a server whose byte budget holds only a few per page;
// `dlq export` over --server still writes every payload whole.
func TestCLIListsOverBoundedServer(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e *cliEnv) {
		var tok struct{ Secret string }
		e.json(&tok, "tokens", "create", "--name", "admin-token", "--role", "admin")
		r := &remoteEnv{cliEnv: e, token: tok.Secret,
			url: apiServerOpts(t, e.db, &backstop.Config{}, api.Options{ListMaxBytes: 32 << 10})}

		ctx := context.Background()
		s, err := dburl.Open(ctx, e.db)
		if err != nil {
			t.Fatal(err)
		}
		c, err := backstop.NewClient(s, &backstop.Config{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			s.Close()
			t.Fatal(err)
		}
		const n = 30
		payloads := map[string]string{}
		ps := make([]backstop.EnqueueParams, n)
		for i := range ps {
			id := fmt.Sprintf("big-%02d", i)
			payloads[id] = fmt.Sprintf(`{"i":%d,"blob":"%s"}`, i, strings.Repeat("x", 4000+i*200))
			ps[i] = backstop.EnqueueParams{ID: id, Queue: "q", Kind: "boom", MaxAttempts: 1, Payload: json.RawMessage(payloads[id])}
		}
		_, err = c.EnqueueMany(ctx, ps)
		s.Close()
		if err != nil {
			t.Fatal(err)
		}

		type item struct {
			ID          string          `json:"id"`
			Payload     json.RawMessage `json:"payload"`
			PayloadSize *int            `json:"payload_size"`
		}
		check := func(args []string, withPayload bool) {
			t.Helper()
			got := r.same(args...)
			if got.code != 0 {
				t.Fatalf("backstop %s: exit %d %s", strings.Join(args, " "), got.code, got.stderr)
			}
			var items []item
			if err := json.Unmarshal([]byte(got.stdout), &items); err != nil {
				t.Fatalf("backstop %s: %v", strings.Join(args, " "), err)
			}
			if len(items) != n {
				t.Fatalf("backstop %s: %d items, want %d", strings.Join(args, " "), len(items), n)
			}
			for _, it := range items {
				if it.PayloadSize == nil || *it.PayloadSize != len(payloads[it.ID]) {
					t.Errorf("backstop %s: %s payload_size %v, want %d", strings.Join(args, " "), it.ID, it.PayloadSize, len(payloads[it.ID]))
				}
				if !withPayload && it.Payload != nil {
					t.Fatalf("backstop %s: %s is listed with its payload", strings.Join(args, " "), it.ID)
				}
				if withPayload && compact(it.Payload) != payloads[it.ID] {
					t.Fatalf("backstop %s: %s payload %.60s…, want it whole", strings.Join(args, " "), it.ID, it.Payload)
				}
			}
		}
		check([]string{"tasks", "list", "-o", "json"}, false)
		check([]string{"tasks", "list", "--with-payload", "-o", "json"}, true)
		r.same("tasks", "list", "--with-payload")
		r.same("tasks", "list")

		runUntil(t, e.db, "q", func(ctx context.Context, task *backstop.Task) error {
			return backstop.Permanent(errors.New("no"))
		}, func(c *backstop.Client) bool {
			dead, err := c.DeadLetters(context.Background(), backstop.ListParams{Limit: 1000, WithoutPayload: true})
			return err == nil && len(dead) == n
		})
		check([]string{"dlq", "list", "-o", "json"}, false)
		check([]string{"dlq", "list", "--with-payload", "-o", "json"}, true)
		if got := r.same("tasks", "show", "big-29", "-o", "json"); !strings.Contains(got.stdout, strings.Repeat("x", 4000+29*200)) {
			t.Errorf("tasks show: the payload is not whole:\n%.300s", got.stdout)
		}

		// dlq export over --server writes every payload whole.
		out := filepath.Join(t.TempDir(), "dead.ndjson")
		if got := r.remote("", "dlq", "export", "--out", out); got.code != 0 {
			t.Fatalf("dlq export: exit %d %s", got.code, got.stderr)
		}
		f, err := os.Open(out)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<20)
		seen := map[string]bool{}
		for sc.Scan() {
			var it item
			if err := json.Unmarshal(sc.Bytes(), &it); err != nil {
				t.Fatal(err)
			}
			if compact(it.Payload) != payloads[it.ID] {
				t.Fatalf("export: %s payload %.60s…, want it whole", it.ID, it.Payload)
			}
			seen[it.ID] = true
		}
		if len(seen) != n {
			t.Fatalf("export: %d dead letters, want %d", len(seen), n)
		}
	})
}
