package cli

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/dburl"
)

// dayClock is a clock that reads the time it is set to.
type dayClock struct{ t time.Time }

func (c *dayClock) Now() time.Time { return c.t }

// TestTasksListSinceUntil: tasks list --since/--until select tasks by
// creation time, the same on --db and over --server (created_since and
// created_until); ages (7d) and bad times behave as in dlq list.
func TestTasksListSinceUntil(t *testing.T) {
	t.Parallel()
	forEachDB(t, func(t *testing.T, e *cliEnv) {
		r := newRemoteEnv(t, e, "viewer")
		ctx := context.Background()
		s, err := dburl.Open(ctx, e.db)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		clock := &dayClock{}
		c, err := backstop.NewClient(s, &backstop.Config{Clock: clock, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		for i, id := range []string{"day-1", "day-2", "day-3"} {
			clock.t = time.Date(2020, 1, 1+i, 0, 0, 0, 0, time.UTC)
			if _, err := c.Enqueue(ctx, backstop.EnqueueParams{ID: id, Queue: "since", Kind: "k", RunAt: clock.t}); err != nil {
				t.Fatal(err)
			}
		}
		for _, tc := range []struct {
			args []string
			want []string
		}{
			{[]string{"--since", "2020-01-01T12:00:00Z"}, []string{"day-2", "day-3"}},
			{[]string{"--until", "2020-01-02T00:00:00Z"}, []string{"day-1", "day-2"}},
			{[]string{"--since", "2020-01-01T12:00:00Z", "--until", "2020-01-02T12:00:00Z"}, []string{"day-2"}},
			{[]string{"--since", "1d"}, []string{}},
			{[]string{"--until", "1d"}, []string{"day-1", "day-2", "day-3"}},
		} {
			args := append([]string{"tasks", "list", "--queue", "since", "-o", "json"}, tc.args...)
			got := r.same(args...)
			ids := e.listIDs(append([]string{"--queue", "since"}, tc.args...)...)
			if got.code != 0 || len(ids) != len(tc.want) {
				t.Errorf("%v: exit %d, ids %v, want %v", tc.args, got.code, ids, tc.want)
				continue
			}
			for i := range ids {
				if ids[i] != tc.want[i] {
					t.Errorf("%v: ids %v, want %v", tc.args, ids, tc.want)
					break
				}
			}
		}
		for _, bad := range [][]string{
			{"--since", "yesterday"},
			{"--until", "2020-13-01T00:00:00Z"},
			{"--since", "2020-01-03T00:00:00Z", "--until", "2020-01-01T00:00:00Z"},
		} {
			args := append([]string{"tasks", "list", "--queue", "since"}, bad...)
			if got := r.same(args...); got.code != ExitUsage {
				t.Errorf("%v: exit %d, want %d: %s", bad, got.code, ExitUsage, got.stderr)
			}
		}
	})
}
