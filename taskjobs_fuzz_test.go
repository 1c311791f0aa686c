package backstop

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/backstophq/backstop/internal/dburl"
	"github.com/backstophq/backstop/internal/testdb"
)

// FuzzTaskJobParams: a task action's request either is refused with
// ErrInvalid, naming a field, before anything is written (no job record,
// no task changed), or is a selection the job can run; it never panics.
func FuzzTaskJobParams(f *testing.F) {
	for _, s := range []struct {
		action, states, where, ids, reason string
		all                                bool
		prio                               int
	}{
		{"task.cancel", "pending", "", "", "", false, 0},
		{"task.delete", "", "payload.a == 1", "", "x", false, 0},
		{"task.delete", "running", "", "", "x", false, 0},
		{"task.reprioritize", "", "", "t1,t2", "", false, 40000},
		{"task.run_now", "", "", "", "", true, 0},
		{"task.run_now", "scheduled", "", "", "", true, 0},
		{"task.explode", "", "", "", "", false, 0},
		{"task.cancel", "", "payload.(", "", "", false, 0},
		{"task.cancel", "", "", "a b,\x00", "", false, 0},
		{"task.cancel", "weird", "", "", strings.Repeat("r", 2000), false, 0},
	} {
		f.Add(s.action, s.states, s.where, s.ids, s.reason, s.all, s.prio)
	}
	ctx := context.Background()
	st, err := dburl.Open(ctx, testdb.SQLite(f))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { st.Close() })
	if err := st.Migrate(ctx); err != nil {
		f.Fatal(err)
	}
	c, err := NewClient(st, nil)
	if err != nil {
		f.Fatal(err)
	}
	if _, err := c.Enqueue(ctx, EnqueueParams{ID: "t1", Queue: "q", Kind: "k"}); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, action, states, where, ids, reason string, all bool, prio int) {
		p := TaskJobParams{Action: action, Reason: reason, All: all, Filter: ListParams{Where: where, Queue: "none"}}
		if states != "" {
			for _, s := range strings.Split(states, ",") {
				p.Filter.States = append(p.Filter.States, State(s))
			}
		}
		if ids != "" {
			p.IDs, p.Filter = strings.Split(ids, ","), ListParams{}
		}
		if action == TaskReprioritize {
			p.Priority = &prio
		}
		_, _, err := c.checkTaskJob(&p)
		if err == nil {
			return
		}
		var ve *ValidationError
		if !errors.Is(err, ErrInvalid) || !errors.As(err, &ve) || ve.Field == "" {
			t.Fatalf("%+v: %v is not a ValidationError naming a field", p, err)
		}
		if _, err2 := c.TaskJob(ctx, p, nil); !errors.Is(err2, ErrInvalid) {
			t.Fatalf("%+v: checked %v, run %v", p, err, err2)
		}
		if recs, err := c.Redrives(ctx, "", 10); err != nil || len(recs) != 0 {
			t.Fatalf("%+v refused, yet a job was recorded: %v %v", p, recs, err)
		}
	})
}
