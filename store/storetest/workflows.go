package storetest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/testwait"
	"github.com/backstophq/backstop/store"
)

// LockWaitProbe says whether a transaction of the store is waiting for a
// lock another one holds right now (Postgres: a backend waiting on a lock
// in pg_locks; SQLite: a wait for the one writer connection). The
// LockRun test uses it to know the second transaction got as far as the
// lock before it lets the first commit.
type LockWaitProbe func(ctx context.Context, s store.Store) (bool, error)

// WithLockWaitProbe sets the driver's LockWaitProbe (without one the
// LockRun turn-taking test skips).
func WithLockWaitProbe(f LockWaitProbe) Option {
	return func(s *suite) { s.lockWait = f }
}

// testWorkflows: the workflow seam (store/workflows.go) — definitions and
// their versions, runs and step rows, written in transactions that compose
// with Settle, Enqueue and AppendEvents. Every time is the frozen clock's.
func (s *suite) testWorkflows(t *testing.T) {
	t.Run("PutWorkflowVersions", s.wfPutVersions)
	t.Run("PutWorkflowConcurrent", s.wfPutConcurrent)
	t.Run("PutWorkflowWritesItsEvent", s.wfPutWritesItsEvent)
	t.Run("RunWakeups", s.wfRunWakeups)
	t.Run("GetWorkflow", s.wfGet)
	t.Run("ListWorkflows", s.wfList)
	t.Run("InsertRun", s.wfInsertRun)
	t.Run("LockRunUnknown", s.wfLockRunUnknown)
	t.Run("UpdateRun", s.wfUpdateRun)
	t.Run("UpdateRuns", s.wfUpdateRuns)
	t.Run("PutSteps", s.wfPutSteps)
	t.Run("WritePlan", s.wfWritePlan)     // workflow_writeplan.go
	t.Run("WriteLatest", s.wfWriteLatest) // workflow_latest.go
	t.Run("StepsOfTasks", s.wfStepsOfTasks)
	t.Run("RunInputsOfTasks", s.wfRunInputsOfTasks)
	t.Run("GetRunOrdering", s.wfGetRunOrdering)
	t.Run("ListRuns", s.wfListRuns)
	t.Run("DeleteFinishedRuns", s.wfDeleteFinishedRuns)
	t.Run("InTx", func(t *testing.T) {
		t.Run("Commit", func(t *testing.T) {
			t.Parallel()
			b := s.wfSetup(t)
			wfCommit(t, b, b.store.InTx)
		})
		t.Run("Rollback", func(t *testing.T) {
			t.Parallel()
			b := s.wfSetup(t)
			wfRollback(t, b, func(ctx context.Context, fn func(store.Tx) error) error {
				err := b.store.InTx(ctx, func(tx store.Tx) error {
					if err := fn(tx); err != nil {
						return err
					}
					return errBoom
				})
				if !errors.Is(err, errBoom) {
					t.Fatalf("InTx: %v, want fn's error", err)
				}
				return nil
			})
		})
		t.Run("FailedOperationRollsBack", func(t *testing.T) {
			t.Parallel()
			b := s.wfSetup(t)
			wfRollback(t, b, func(ctx context.Context, fn func(store.Tx) error) error {
				err := b.store.InTx(ctx, func(tx store.Tx) error {
					if err := fn(tx); err != nil {
						return err
					}
					// The run exists (fn inserted it): the insert fails and
					// takes the transaction with it.
					if err := tx.InsertRun(ctx, wfRun(b, "run-1", "order")); !errors.Is(err, store.ErrConflict) {
						t.Errorf("insert of an existing run: %v, want ErrConflict", err)
					}
					if _, _, err := tx.LockRun(ctx, "run-1"); err == nil {
						t.Error("an operation after a failed one was accepted")
					}
					return nil
				})
				if !errors.Is(err, store.ErrConflict) {
					t.Fatalf("InTx: %v, want the failed insert's ErrConflict", err)
				}
				return nil
			})
		})
	})
	for _, k := range s.boundTx {
		t.Run(k.name, func(t *testing.T) {
			t.Run("Commit", func(t *testing.T) {
				t.Parallel()
				b := s.wfSetup(t)
				wfCommit(t, b, func(ctx context.Context, fn func(store.Tx) error) error {
					tx, commit, rollback, err := k.begin(ctx, b.store)
					if err != nil {
						return err
					}
					if err := fn(tx); err != nil {
						return errors.Join(err, rollback())
					}
					return commit()
				})
			})
			t.Run("Rollback", func(t *testing.T) {
				t.Parallel()
				b := s.wfSetup(t)
				wfRollback(t, b, func(ctx context.Context, fn func(store.Tx) error) error {
					tx, _, rollback, err := k.begin(ctx, b.store)
					if err != nil {
						return err
					}
					if err := fn(tx); err != nil {
						return errors.Join(err, rollback())
					}
					return rollback()
				})
			})
		})
	}
	t.Run("LockRunTakesTurns", func(t *testing.T) { s.wfLockTurns(t, lockOne) })
	t.Run("LockRunsTakesTurns", func(t *testing.T) { s.wfLockTurns(t, lockMany) })
	t.Run("LockRuns", s.wfLockRuns)
	t.Run("LockRunsSettleTakesTurns", func(t *testing.T) { s.wfLockTurns(t, lockSettle) })
	t.Run("LockRunsSettle", s.wfLockRunsSettle)
}

// lockSettle locks one run in tx by LockRunsSettle, with an unknown run
// beside it and the settlement of a task that is not (applied: none).
func lockSettle(ctx context.Context, tx store.Tx, id string) (*store.RunRecord, error) {
	runs, oks, err := tx.LockRunsSettle(ctx, []string{"a-run-that-is-not", id},
		[]store.Settlement{{TaskID: id + ".no-task", ExecutionID: "e", Outcome: bt.OutcomeSucceeded,
			FinishedAt: time.Now(), State: bt.StateSucceeded}})
	if err != nil {
		return nil, err
	}
	if len(runs) != 1 || len(oks) != 1 || oks[0] {
		return nil, fmt.Errorf("LockRunsSettle answered %d runs and %v, want 1 and [false]", len(runs), oks)
	}
	return &runs[0].Run, nil
}

// wfLockRunsSettle: LockRunsSettle answers what LockRuns and Settle
// would, in one call: the runs that exist, in run id order, with their
// steps, and for each settlement whether its lease was current; the
// settlements it applied are written (the task's state, its execution),
// the others leave their task alone; nothing of a rolled-back transaction
// remains; no settlement or no run asked: the other half alone.
func (s *suite) wfLockRunsSettle(t *testing.T) {
	t.Parallel()
	b := s.wfSetup(t)
	for _, id := range []string{"run-b", "run-a"} {
		inTx(t, b, func(tx store.Tx) error { return tx.InsertRun(b.ctx, wfRun(b, id, "order")) })
	}
	a0, b0 := wfStep(b, "run-a", "charge", 0, "run-a.charge", "pending"), wfStep(b, "run-b", "charge", 0, "run-b.charge", "pending")
	inTx(t, b, func(tx store.Tx) error { return tx.PutSteps(b.ctx, []store.StepRecord{b0, a0}) })
	for _, id := range []string{"run-a.charge", "run-b.charge", "run-c.charge"} {
		b.enqueue(backstop.EnqueueParams{ID: id, Queue: "lrs", Kind: "k"})
	}
	got := claim(t, b, "lrs", 3)
	if len(got) != 3 {
		t.Fatalf("claimed %d tasks, want 3", len(got))
	}
	exec := map[string]string{}
	for _, tk := range got {
		exec[tk.ID] = tk.ExecutionID
	}
	now := b.clock.Now()
	ok := func(id string) store.Settlement {
		return store.Settlement{TaskID: id, ExecutionID: exec[id], Outcome: bt.OutcomeSucceeded, FinishedAt: now, State: bt.StateSucceeded}
	}
	stale := ok("run-b.charge")
	stale.ExecutionID = "not-its-lease"
	ss := []store.Settlement{ok("run-a.charge"), stale, ok("run-c.charge")}

	// Rolled back: nothing written.
	errRollback := errors.New("roll back")
	if err := b.store.InTx(b.ctx, func(tx store.Tx) error {
		if _, oks, err := tx.LockRunsSettle(b.ctx, []string{"run-a"}, ss[:1]); err != nil || !oks[0] {
			return fmt.Errorf("LockRunsSettle: %v %v", oks, err)
		}
		return errRollback
	}); !errors.Is(err, errRollback) {
		t.Fatalf("rolled back: %v", err)
	}
	if st := b.get("run-a.charge").State; st != bt.StateRunning {
		t.Fatalf("after a rolled-back LockRunsSettle the task is %s, want running", st)
	}

	var locked []store.LockedRun
	var oks []bool
	inTx(t, b, func(tx store.Tx) error {
		var err error
		locked, oks, err = tx.LockRunsSettle(b.ctx, []string{"run-c", "run-b", "run-a"}, ss)
		return err
	})
	var ids []string
	for _, l := range locked {
		ids = append(ids, l.Run.RunID)
	}
	eq(t, "runs", ids, []string{"run-a", "run-b"})
	checkRun(t, "run-a", &locked[0].Run, wfRun(b, "run-a", "order"))
	checkSteps(t, "run-a's steps", locked[0].Steps, []store.StepRecord{a0})
	checkSteps(t, "run-b's steps", locked[1].Steps, []store.StepRecord{b0})
	eq(t, "applied", oks, []bool{true, false, true})
	for id, want := range map[string]bt.State{"run-a.charge": bt.StateSucceeded, "run-b.charge": bt.StateRunning,
		"run-c.charge": bt.StateSucceeded} {
		if st := b.get(id).State; st != want {
			t.Errorf("%s: %s, want %s", id, st, want)
		}
	}

	// One half without the other.
	inTx(t, b, func(tx store.Tx) error {
		runs, none, err := tx.LockRunsSettle(b.ctx, []string{"run-b"}, nil)
		if err != nil {
			return err
		}
		if len(runs) != 1 || runs[0].Run.RunID != "run-b" || len(none) != 0 {
			t.Errorf("no settlement: %d runs, %v", len(runs), none)
		}
		runs, oks, err := tx.LockRunsSettle(b.ctx, nil, []store.Settlement{ok("run-b.charge")})
		if err != nil {
			return err
		}
		eq(t, "no run: runs", runs, []store.LockedRun{})
		eq(t, "no run: applied", oks, []bool{true})
		return nil
	})
	if st := b.get("run-b.charge").State; st != bt.StateSucceeded {
		t.Errorf("run-b.charge settled without a run locked: %s, want succeeded", st)
	}
}

// lockOne and lockMany lock one run in tx, by LockRun and by LockRuns (with
// an unknown run beside it).
func lockOne(ctx context.Context, tx store.Tx, id string) (*store.RunRecord, error) {
	r, _, err := tx.LockRun(ctx, id)
	return r, err
}

func lockMany(ctx context.Context, tx store.Tx, id string) (*store.RunRecord, error) {
	runs, err := tx.LockRuns(ctx, []string{"a-run-that-is-not", id})
	if err != nil {
		return nil, err
	}
	if len(runs) != 1 {
		return nil, fmt.Errorf("LockRuns answered %d runs, want 1", len(runs))
	}
	return &runs[0].Run, nil
}

// wfLockRuns: LockRuns answers the runs that exist, in run id order, each
// with its own steps (ordered by step and item); none asked: none.
func (s *suite) wfLockRuns(t *testing.T) {
	t.Parallel()
	b := s.wfSetup(t)
	for _, id := range []string{"run-b", "run-a", "run-c"} {
		inTx(t, b, func(tx store.Tx) error { return tx.InsertRun(b.ctx, wfRun(b, id, "order")) })
	}
	a2, a1 := wfStep(b, "run-a", "ship", 0, "run-a.ship", "pending"), wfStep(b, "run-a", "charge", 0, "run-a.charge", "succeeded")
	fan1, fan0 := wfStep(b, "run-b", "mail", 1, "run-b.mail.1", "pending"), wfStep(b, "run-b", "mail", 0, "run-b.mail.0", "pending")
	inTx(t, b, func(tx store.Tx) error { return tx.PutSteps(b.ctx, []store.StepRecord{a2, fan1, a1, fan0}) })
	var got []store.LockedRun
	inTx(t, b, func(tx store.Tx) error {
		var err error
		got, err = tx.LockRuns(b.ctx, []string{"run-c", "nope", "run-b", "run-a"})
		return err
	})
	var ids []string
	for _, l := range got {
		ids = append(ids, l.Run.RunID)
	}
	eq(t, "runs", ids, []string{"run-a", "run-b", "run-c"})
	checkRun(t, "run-a", &got[0].Run, wfRun(b, "run-a", "order"))
	checkSteps(t, "run-a's steps", got[0].Steps, []store.StepRecord{a1, a2})
	checkSteps(t, "run-b's steps", got[1].Steps, []store.StepRecord{fan0, fan1})
	eq(t, "run-c's steps", got[2].Steps, []store.StepRecord{})
	// A run named twice is answered once, with its steps once.
	inTx(t, b, func(tx store.Tx) error {
		var err error
		got, err = tx.LockRuns(b.ctx, []string{"run-b", "run-a", "run-b"})
		return err
	})
	ids = nil
	for _, l := range got {
		ids = append(ids, l.Run.RunID)
	}
	eq(t, "runs, one named twice", ids, []string{"run-a", "run-b"})
	checkSteps(t, "run-a's steps, run-b named twice", got[0].Steps, []store.StepRecord{a1, a2})
	checkSteps(t, "run-b's steps, named twice", got[1].Steps, []store.StepRecord{fan0, fan1})
	inTx(t, b, func(tx store.Tx) error {
		none, err := tx.LockRuns(b.ctx, nil)
		eq(t, "none asked", none, []store.LockedRun{})
		return err
	})
}

// wfSetup is setup on a frozen clock.
func (s *suite) wfSetup(t *testing.T) *bundle {
	b := s.setup(t, nil)
	b.clock.freeze()
	return b
}

// wfDef is a definition as package workflow registers it.
// wfPutWritesItsEvent: a registration and its audit event commit
// together: an event the log refuses registers nothing; each registration,
// a new version or the latest again, writes one event naming the version
// it returned.
func (s *suite) wfPutWritesItsEvent(t *testing.T) {
	t.Parallel()
	b := s.setup(t, nil)
	now := b.clock.Now()
	refused := func(store.WorkflowDef, bool) bt.Event { return bt.Event{Type: store.EventWorkflowApplied} } // no time
	if _, _, err := b.store.PutWorkflow(b.ctx, wfDef(b, "audited", "h1"), refused); err == nil {
		t.Fatal("a registration whose event the log refuses was stored")
	}
	if _, err := b.store.GetWorkflow(b.ctx, "audited", 0); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("after a refused event: %v, want no workflow", err)
	}
	var bodies []string
	audit := func(d store.WorkflowDef, created bool) bt.Event {
		body := fmt.Sprintf(`{"version":%d,"created":%t}`, d.Version, created)
		bodies = append(bodies, body)
		return store.NewEvent(now, store.EventWorkflowApplied, d.Name, "", "", "cli:ops", json.RawMessage(body))
	}
	for _, h := range []string{"h1", "h1", "h2"} {
		if _, _, err := b.store.PutWorkflow(b.ctx, wfDef(b, "audited", h), audit); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{`{"version":1,"created":true}`, `{"version":1,"created":false}`, `{"version":2,"created":true}`}
	var got []string
	// The log serves an event once every earlier transaction ended (other
	// tests' run alongside): read until the three are there.
	testwait.For(t, "the registrations' events", func() bool {
		p, err := b.store.ReadEvents(b.ctx, store.EventQuery{Stream: store.Stream{Kind: store.StreamType, Value: store.EventWorkflowApplied}, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		got = got[:0]
		for _, e := range p.Events {
			got = append(got, string(e.Body))
		}
		return len(got) >= len(want)
	})
	if len(got) != len(want) {
		t.Fatalf("events %v, want %v (made: %v)", got, want, bodies)
	}
	for i := range want {
		jsonEq(t, fmt.Sprintf("event %d", i), json.RawMessage(got[i]), json.RawMessage(want[i]))
	}
}

// wfRunWakeups: a run's wake-up is set, replaced and removed in a
// transaction (nothing of a rolled-back one remains), and RunsToWake lists
// the runs whose time came, earliest first, at most limit.
func (s *suite) wfRunWakeups(t *testing.T) {
	t.Parallel()
	b := s.setup(t, nil)
	now := b.clock.Now()
	set := func(run string, at time.Time) {
		t.Helper()
		if err := b.store.InTx(b.ctx, func(tx store.Tx) error { return tx.SetRunWake(b.ctx, run, at) }); err != nil {
			t.Fatal(err)
		}
	}
	due := func(at time.Time, limit int) []string {
		t.Helper()
		ids, err := b.store.RunsToWake(b.ctx, at, limit)
		if err != nil {
			t.Fatal(err)
		}
		return ids
	}
	set("a", now.Add(time.Minute))
	set("b", now.Add(2*time.Minute))
	set("a", now.Add(3*time.Minute)) // replaces a's
	set("c", now.Add(4*time.Minute))
	set("c", time.Time{}) // removes c's
	errRollback := errors.New("roll back")
	if err := b.store.InTx(b.ctx, func(tx store.Tx) error {
		if err := tx.SetRunWake(b.ctx, "d", now); err != nil {
			return err
		}
		return errRollback
	}); !errors.Is(err, errRollback) {
		t.Fatalf("rolled back: %v", err)
	}
	for _, tc := range []struct {
		at    time.Time
		limit int
		want  []string
	}{
		{now.Add(time.Minute), 10, nil},
		{now.Add(2 * time.Minute), 10, []string{"b"}},
		{now.Add(time.Hour), 10, []string{"b", "a"}},
		{now.Add(time.Hour), 1, []string{"b"}},
	} {
		if got := due(tc.at, tc.limit); !slices.Equal(got, tc.want) {
			t.Errorf("due at +%s (limit %d): %v, want %v", tc.at.Sub(now), tc.limit, got, tc.want)
		}
	}
}

func wfDef(b *bundle, name, hash string) store.WorkflowDef {
	return store.WorkflowDef{Name: name, PlanHash: hash, CreatedAt: b.clock.Now(),
		Definition: json.RawMessage(fmt.Sprintf(`{"name":%q,"steps":[{"id":"a","kind":%q}]}`, name, hash))}
}

func wfPut(t *testing.T, b *bundle, d store.WorkflowDef) (store.WorkflowDef, bool) {
	t.Helper()
	out, created, err := b.store.PutWorkflow(b.ctx, d, nil)
	if err != nil {
		t.Fatalf("put workflow %s %s: %v", d.Name, d.PlanHash, err)
	}
	return out, created
}

// jsonEq compares two JSON texts as values (Postgres hands jsonb back in
// its own layout).
func jsonEq(t *testing.T, what string, got, want json.RawMessage) {
	t.Helper()
	if len(got) == 0 || len(want) == 0 {
		if len(got) != len(want) {
			t.Fatalf("%s: got %q, want %q", what, got, want)
		}
		return
	}
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("%s: got %q: %v", what, got, err)
	}
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatalf("%s: want %q: %v", what, want, err)
	}
	eq(t, what, g, w)
}

func checkDef(t *testing.T, what string, got store.WorkflowDef, want store.WorkflowDef, version int) {
	t.Helper()
	eq(t, what+" name", got.Name, want.Name)
	eq(t, what+" version", got.Version, version)
	eq(t, what+" hash", got.PlanHash, want.PlanHash)
	jsonEq(t, what+" definition", got.Definition, want.Definition)
	if !got.CreatedAt.Equal(want.CreatedAt) {
		t.Fatalf("%s created at %s, want %s", what, got.CreatedAt, want.CreatedAt)
	}
}

func (s *suite) wfPutVersions(t *testing.T) {
	t.Parallel()
	b := s.wfSetup(t)
	a := wfDef(b, "order", "hash-a")
	out, created := wfPut(t, b, a)
	eq(t, "first put created", created, true)
	checkDef(t, "first put", out, a, 1)

	// The same hash again: the same version, nothing created (CreatedAt
	// is the first registration's).
	b.clock.Advance(time.Minute)
	again := wfDef(b, "order", "hash-a")
	out, created = wfPut(t, b, again)
	eq(t, "same hash created", created, false)
	checkDef(t, "same hash", out, a, 1)

	// A new hash: the next version.
	bdef := wfDef(b, "order", "hash-b")
	out, created = wfPut(t, b, bdef)
	eq(t, "new hash created", created, true)
	checkDef(t, "new hash", out, bdef, 2)

	// Another name counts its own versions, even for a hash "order" has.
	other := wfDef(b, "refund", "hash-b")
	out, created = wfPut(t, b, other)
	eq(t, "other name created", created, true)
	checkDef(t, "other name", out, other, 1)
	out, created = wfPut(t, b, wfDef(b, "order", "hash-b"))
	eq(t, "order unchanged by the other name", [2]any{out.Version, created}, [2]any{2, false})

	// Going back to an earlier definition makes it the latest again: a new
	// version (its runs start from it), with the old hash.
	b.clock.Advance(time.Minute)
	back := wfDef(b, "order", "hash-a")
	out, created = wfPut(t, b, back)
	eq(t, "revert created", created, true)
	checkDef(t, "revert", out, back, 3)
	latest, err := b.store.GetWorkflow(b.ctx, "order", 0)
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "latest after revert", latest.Version, 3)

	// A definition without a time gets the store's.
	nt := wfDef(b, "untimed", "hash-u")
	nt.CreatedAt = time.Time{}
	out, _ = wfPut(t, b, nt)
	if out.CreatedAt.IsZero() || out.CreatedAt.Location() != time.UTC {
		t.Fatalf("created at %v, want the store's time in UTC", out.CreatedAt)
	}
	for _, bad := range []store.WorkflowDef{{PlanHash: "h", Definition: json.RawMessage(`{}`)},
		{Name: "x", Definition: json.RawMessage(`{}`)}, {Name: "x", PlanHash: "h"}} {
		if _, _, err := b.store.PutWorkflow(b.ctx, bad, nil); err == nil {
			t.Fatalf("put %+v: accepted", bad)
		}
	}
	if _, err := b.store.GetWorkflow(b.ctx, "x", 0); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a refused definition was stored: %v", err)
	}
}

// wfPutConcurrent: registrations at the same moment (processes applying
// the same file, or two edits) each end with one version per definition:
// the one that lost the next version to another reads the latest again.
func (s *suite) wfPutConcurrent(t *testing.T) {
	t.Parallel()
	b := s.wfSetup(t)
	type res struct {
		out     store.WorkflowDef
		created bool
		err     error
	}
	put := func(defs []store.WorkflowDef) []res {
		out := make([]res, len(defs))
		var wg sync.WaitGroup
		for i, d := range defs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r, created, err := b.store.PutWorkflow(b.ctx, d, nil)
				out[i] = res{r, created, err}
			}()
		}
		wg.Wait()
		return out
	}
	// The same definition eight times: one version, created once.
	same := make([]store.WorkflowDef, 8)
	for i := range same {
		same[i] = wfDef(b, "order", "hash-a")
	}
	created := 0
	for i, r := range put(same) {
		if r.err != nil {
			t.Fatalf("put %d: %v", i, r.err)
		}
		eq(t, "version", r.out.Version, 1)
		if r.created {
			created++
		}
	}
	eq(t, "created", created, 1)
	// Four different definitions: versions 2 to 5, one each.
	var diff []store.WorkflowDef
	for i := range 4 {
		diff = append(diff, wfDef(b, "order", fmt.Sprintf("hash-%d", i)))
	}
	versions := map[int]string{}
	for i, r := range put(diff) {
		if r.err != nil {
			t.Fatalf("put %d: %v", i, r.err)
		}
		eq(t, "created", r.created, true)
		versions[r.out.Version] = r.out.PlanHash
	}
	eq(t, "versions", len(versions), 4)
	for v := 2; v <= 5; v++ {
		got, err := b.store.GetWorkflow(b.ctx, "order", v)
		if err != nil {
			t.Fatal(err)
		}
		eq(t, fmt.Sprintf("version %d", v), got.PlanHash, versions[v])
	}
}

func (s *suite) wfGet(t *testing.T) {
	t.Parallel()
	b := s.wfSetup(t)
	a := wfDef(b, "order", "hash-a")
	wfPut(t, b, a)
	b.clock.Advance(time.Second)
	bdef := wfDef(b, "order", "hash-b")
	wfPut(t, b, bdef)

	got, err := b.store.GetWorkflow(b.ctx, "order", 0)
	if err != nil {
		t.Fatal(err)
	}
	checkDef(t, "latest", *got, bdef, 2)
	got, err = b.store.GetWorkflow(b.ctx, "order", 1)
	if err != nil {
		t.Fatal(err)
	}
	checkDef(t, "version 1", *got, a, 1)
	for _, c := range []struct {
		name    string
		version int
	}{{"order", 3}, {"nope", 0}, {"nope", 1}} {
		if _, err := b.store.GetWorkflow(b.ctx, c.name, c.version); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("get %s version %d: %v, want ErrNotFound", c.name, c.version, err)
		}
	}

	got, err = b.store.WorkflowByHash(b.ctx, "hash-a")
	if err != nil {
		t.Fatal(err)
	}
	checkDef(t, "by hash", *got, a, 1)
	got, err = b.store.WorkflowByHash(b.ctx, "hash-b")
	if err != nil {
		t.Fatal(err)
	}
	checkDef(t, "by hash b", *got, bdef, 2)
	if _, err := b.store.WorkflowByHash(b.ctx, "hash-z"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("by unknown hash: %v, want ErrNotFound", err)
	}
}

func (s *suite) wfList(t *testing.T) {
	t.Parallel()
	b := s.wfSetup(t)
	got, err := b.store.ListWorkflows(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "no workflows", got, []store.WorkflowDef{})
	wfPut(t, b, wfDef(b, "order", "o1"))
	wfPut(t, b, wfDef(b, "order", "o2"))
	wfPut(t, b, wfDef(b, "billing", "b1"))
	wfPut(t, b, wfDef(b, "order", "o3"))
	wfPut(t, b, wfDef(b, "Zeta", "z1"))
	got, err = b.store.ListWorkflows(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, w := range got {
		names = append(names, fmt.Sprintf("%s v%d %s", w.Name, w.Version, w.PlanHash))
		jsonEq(t, w.Name+" definition", w.Definition, wfDef(b, w.Name, w.PlanHash).Definition)
	}
	// By name, as bytes sort (upper case first).
	eq(t, "latest per name", names, []string{"Zeta v1 z1", "billing v1 b1", "order v3 o3"})
}

// wfRun is a new run as the engine starts it.
func wfRun(b *bundle, id, workflow string) store.RunRecord {
	now := b.clock.Now()
	return store.RunRecord{RunID: id, Workflow: workflow, Version: 1, PlanHash: "hash-" + workflow,
		State: "running", Input: json.RawMessage(`{"order":7,"emails":["a@x","b@x"]}`), CreatedAt: now, UpdatedAt: now}
}

// wfStep is a step row.
func wfStep(b *bundle, run, step string, item int, task string, state store.StepState) store.StepRecord {
	return store.StepRecord{RunID: run, StepID: step, Item: item, TaskID: task, State: state, UpdatedAt: b.clock.Now()}
}

func inTx(t *testing.T, b *bundle, fn func(tx store.Tx) error) {
	t.Helper()
	if err := b.store.InTx(b.ctx, fn); err != nil {
		t.Fatal(err)
	}
}

func checkRun(t *testing.T, what string, got *store.RunRecord, want store.RunRecord) {
	t.Helper()
	jsonEq(t, what+" input", got.Input, want.Input)
	g, w := *got, want
	g.Input, w.Input = nil, nil
	if !g.CreatedAt.Equal(w.CreatedAt) || !g.UpdatedAt.Equal(w.UpdatedAt) ||
		(g.FinishedAt == nil) != (w.FinishedAt == nil) || (g.FinishedAt != nil && !g.FinishedAt.Equal(*w.FinishedAt)) {
		t.Fatalf("%s times: got %+v, want %+v", what, g, w)
	}
	g.CreatedAt, g.UpdatedAt, g.FinishedAt = w.CreatedAt, w.UpdatedAt, w.FinishedAt
	eq(t, what, g, w)
}

func checkSteps(t *testing.T, what string, got, want []store.StepRecord) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d rows %+v, want %d %+v", what, len(got), got, len(want), want)
	}
	for i := range got {
		g, w := got[i], want[i]
		jsonEq(t, fmt.Sprintf("%s[%d] result", what, i), g.Result, w.Result)
		if !g.UpdatedAt.Equal(w.UpdatedAt) {
			t.Fatalf("%s[%d] updated at %s, want %s", what, i, g.UpdatedAt, w.UpdatedAt)
		}
		g.Result, w.Result, g.UpdatedAt, w.UpdatedAt = nil, nil, time.Time{}, time.Time{}
		eq(t, fmt.Sprintf("%s[%d]", what, i), g, w)
	}
}

func (s *suite) wfInsertRun(t *testing.T) {
	t.Parallel()
	b := s.wfSetup(t)
	r := wfRun(b, "run-1", "order")
	inTx(t, b, func(tx store.Tx) error { return tx.InsertRun(b.ctx, r) })
	got, steps, err := b.store.GetRun(b.ctx, "run-1")
	if err != nil {
		t.Fatal(err)
	}
	checkRun(t, "inserted", got, r)
	eq(t, "no steps yet", steps, []store.StepRecord{})

	// The same id again: ErrConflict, and the run is as it was.
	dup := wfRun(b, "run-1", "other")
	dup.State = "failed"
	err = b.store.InTx(b.ctx, func(tx store.Tx) error { return tx.InsertRun(b.ctx, dup) })
	if !errors.Is(err, store.ErrConflict) {
		t.Fatalf("insert of an existing run: %v, want ErrConflict", err)
	}
	got, _, err = b.store.GetRun(b.ctx, "run-1")
	if err != nil {
		t.Fatal(err)
	}
	checkRun(t, "after the duplicate", got, r)

	// A run without input keeps none.
	bare := wfRun(b, "run-2", "order")
	bare.Input = nil
	inTx(t, b, func(tx store.Tx) error { return tx.InsertRun(b.ctx, bare) })
	got, _, err = b.store.GetRun(b.ctx, "run-2")
	if err != nil {
		t.Fatal(err)
	}
	checkRun(t, "without input", got, bare)
	if _, _, err := b.store.GetRun(b.ctx, "run-3"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("get unknown run: %v, want ErrNotFound", err)
	}
}

func (s *suite) wfLockRunUnknown(t *testing.T) {
	t.Parallel()
	b := s.wfSetup(t)
	err := b.store.InTx(b.ctx, func(tx store.Tx) error {
		_, _, err := tx.LockRun(b.ctx, "nope")
		return err
	})
	if !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("lock unknown run: %v, want ErrNotFound", err)
	}
	err = b.store.InTx(b.ctx, func(tx store.Tx) error { return tx.UpdateRun(b.ctx, wfRun(b, "nope", "order")) })
	if !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("update unknown run: %v, want ErrNotFound", err)
	}
	if _, err := b.store.ListRuns(b.ctx, store.RunFilter{}); err != nil {
		t.Fatal(err)
	}
}

func (s *suite) wfUpdateRun(t *testing.T) {
	t.Parallel()
	b := s.wfSetup(t)
	r := wfRun(b, "run-1", "order")
	inTx(t, b, func(tx store.Tx) error { return tx.InsertRun(b.ctx, r) })
	b.clock.Advance(time.Minute)
	now := b.clock.Now()
	want := r
	want.State, want.Error, want.Seq, want.UpdatedAt, want.FinishedAt = "failed", "step charge: card declined", 3, now, &now
	inTx(t, b, func(tx store.Tx) error {
		got, steps, err := tx.LockRun(b.ctx, "run-1")
		if err != nil {
			return err
		}
		checkRun(t, "locked", got, r)
		eq(t, "locked steps", steps, []store.StepRecord{})
		// Only State, Error, Seq, UpdatedAt and FinishedAt are written.
		upd := want
		upd.Workflow, upd.Version, upd.PlanHash, upd.Input, upd.CreatedAt = "x", 9, "h", json.RawMessage(`1`), now
		return tx.UpdateRun(b.ctx, upd)
	})
	got, _, err := b.store.GetRun(b.ctx, "run-1")
	if err != nil {
		t.Fatal(err)
	}
	checkRun(t, "updated", got, want)
	// Back to running (a replay resumes it): FinishedAt cleared.
	b.clock.Advance(time.Minute)
	want.State, want.Error, want.Seq, want.UpdatedAt, want.FinishedAt = "running", "", 4, b.clock.Now(), nil
	inTx(t, b, func(tx store.Tx) error { return tx.UpdateRun(b.ctx, want) })
	got, _, err = b.store.GetRun(b.ctx, "run-1")
	if err != nil {
		t.Fatal(err)
	}
	checkRun(t, "resumed", got, want)
}

// wfDeleteFinishedRuns: retention deletes runs in the given states that
// finished before the cut, oldest first, at most limit, with their step
// rows; a run still running, or finished after the cut stays with its
// steps; a stopped run (failed, compensation_failed) goes only once none of
// its step tasks is an open dead letter or still to settle; the tasks are
// not touched.
func (s *suite) wfDeleteFinishedRuns(t *testing.T) {
	t.Parallel()
	b := s.wfSetup(t)
	start := b.clock.Now()
	type seed struct {
		id    string
		state store.RunState
		ended time.Duration // after start; 0: not finished
	}
	seeds := []seed{
		{"old-succeeded", "succeeded", time.Minute},
		{"old-partial", "partial", 2 * time.Minute},
		{"old-compensated", "compensated", 3 * time.Minute},
		{"old-canceled", "canceled", 4 * time.Minute},
		{"old-failed", "failed", time.Minute},
		{"old-comp-failed", "compensation_failed", time.Minute},
		{"old-failed-pending", "failed", time.Minute},
		{"running", "running", 0},
		{"young-succeeded", "succeeded", time.Hour},
	}
	for _, sd := range seeds {
		r := wfRun(b, sd.id, "order")
		r.State = sd.state
		if sd.ended > 0 {
			at := start.Add(sd.ended)
			r.FinishedAt, r.UpdatedAt = &at, at
		}
		inTx(t, b, func(tx store.Tx) error {
			if err := tx.InsertRun(b.ctx, r); err != nil {
				return err
			}
			if err := tx.UpdateRun(b.ctx, r); err != nil {
				return err
			}
			return tx.PutSteps(b.ctx, []store.StepRecord{wfStep(b, sd.id, "a", 0, sd.id+".a", "succeeded")})
		})
	}
	// The stopped runs' step tasks: an open dead letter (a replay may
	// resume its run), a discarded one (nothing can), a pending task.
	b.dead(backstop.EnqueueParams{ID: "old-failed.a", Queue: "wf-open", Kind: "k"})
	b.dead(backstop.EnqueueParams{ID: "old-comp-failed.a", Queue: "wf-closed", Kind: "k"})
	if _, err := b.c.Discard(b.ctx, backstop.DiscardParams{ID: "old-comp-failed.a", Reason: "given up"}); err != nil {
		t.Fatal(err)
	}
	b.enqueue(backstop.EnqueueParams{ID: "old-failed-pending.a", Queue: "wf-pending", Kind: "k"})
	finished := []store.RunState{"succeeded", "partial", "compensated", "canceled"}
	stopped := []store.RunState{"failed", "compensation_failed"}
	cut := start.Add(30 * time.Minute)
	// limit 3: the three that ended first go.
	n, err := b.store.DeleteFinishedRuns(b.ctx, finished, nil, cut, 3)
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "deleted with limit 3", n, 3)
	n, err = b.store.DeleteFinishedRuns(b.ctx, finished, nil, cut, 100)
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "deleted next", n, 1)
	for _, sd := range seeds {
		_, steps, err := b.store.GetRun(b.ctx, sd.id)
		gone := strings.HasPrefix(sd.id, "old-") && sd.state != "failed" && sd.state != "compensation_failed"
		switch {
		case gone && !errors.Is(err, store.ErrNotFound):
			t.Errorf("run %s (%s, ended before the cut): %v, want deleted", sd.id, sd.state, err)
		case !gone && err != nil:
			t.Errorf("run %s (%s): %v, want kept", sd.id, sd.state, err)
		case !gone && len(steps) != 1:
			t.Errorf("run %s: %d steps, want its one step kept", sd.id, len(steps))
		}
		rows, err := b.store.StepsOfTasks(b.ctx, []string{sd.id + ".a"})
		if err != nil {
			t.Fatal(err)
		}
		if gone != (len(rows) == 0) {
			t.Errorf("run %s: %d step rows after retention (deleted %v)", sd.id, len(rows), gone)
		}
	}
	// Nothing left to delete; no states: nothing.
	if n, err := b.store.DeleteFinishedRuns(b.ctx, finished, nil, cut, 100); err != nil || n != 0 {
		t.Fatalf("again: %d %v, want 0", n, err)
	}
	if n, err := b.store.DeleteFinishedRuns(b.ctx, nil, nil, start.Add(48*time.Hour), 100); err != nil || n != 0 {
		t.Fatalf("no states: %d %v, want 0", n, err)
	}
	// A stopped run goes once nothing of it is open: the one whose dead
	// step was discarded; the one with an open dead letter and the one
	// with a pending task stay.
	n, err = b.store.DeleteFinishedRuns(b.ctx, nil, stopped, cut, 100)
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "stopped runs deleted", n, 1)
	if _, _, err := b.store.GetRun(b.ctx, "old-comp-failed"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the stopped run whose dead step was discarded: %v, want deleted", err)
	}
	// Retain applies Config.Retention.Runs (default 7 days): eight days on,
	// the young succeeded run goes; the stopped ones still open and the
	// running one stay.
	b.clock.Advance(8 * 24 * time.Hour)
	res, err := backstop.Retain(b.ctx, b.c)
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "retain runs", res.Runs, 1)
	left, err := b.store.ListRuns(b.ctx, store.RunFilter{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range left {
		ids = append(ids, r.RunID)
	}
	eq(t, "runs left", ids, []string{"running", "old-failed-pending", "old-failed"})
}

// wfUpdateRuns: many runs' state, error, seq, times written at once (a
// finished one and a resumed one, whose FinishedAt is cleared); a list
// naming an unknown run is ErrNotFound and writes nothing.
func (s *suite) wfUpdateRuns(t *testing.T) {
	t.Parallel()
	b := s.wfSetup(t)
	var want []store.RunRecord
	for _, id := range []string{"run-a", "run-b", "run-c"} {
		r := wfRun(b, id, "order")
		inTx(t, b, func(tx store.Tx) error { return tx.InsertRun(b.ctx, r) })
		want = append(want, r)
	}
	b.clock.Advance(time.Minute)
	now := b.clock.Now()
	want[0].State, want[0].Error, want[0].Seq, want[0].UpdatedAt, want[0].FinishedAt = "failed", "step x: boom", 2, now, &now
	want[1].State, want[1].Seq, want[1].UpdatedAt = "compensating", 5, now
	inTx(t, b, func(tx store.Tx) error { return tx.UpdateRuns(b.ctx, want[:2]) })
	for i, w := range want {
		got, _, err := b.store.GetRun(b.ctx, w.RunID)
		if err != nil {
			t.Fatal(err)
		}
		checkRun(t, fmt.Sprintf("run %d", i), got, w)
	}
	// Back to running: FinishedAt cleared; with an unknown run beside it,
	// nothing is written.
	b.clock.Advance(time.Minute)
	resumed := want[0]
	resumed.State, resumed.Error, resumed.UpdatedAt, resumed.FinishedAt = "running", "", b.clock.Now(), nil
	err := b.store.InTx(b.ctx, func(tx store.Tx) error {
		return tx.UpdateRuns(b.ctx, []store.RunRecord{resumed, wfRun(b, "nope", "order")})
	})
	if !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("update with an unknown run: %v, want ErrNotFound", err)
	}
	got, _, err := b.store.GetRun(b.ctx, "run-a")
	if err != nil {
		t.Fatal(err)
	}
	checkRun(t, "after the refused update", got, want[0])
	inTx(t, b, func(tx store.Tx) error { return tx.UpdateRuns(b.ctx, []store.RunRecord{resumed, want[2]}) })
	if got, _, err = b.store.GetRun(b.ctx, "run-a"); err != nil {
		t.Fatal(err)
	}
	checkRun(t, "resumed", got, resumed)
	inTx(t, b, func(tx store.Tx) error { return tx.UpdateRuns(b.ctx, nil) })
}

func (s *suite) wfPutSteps(t *testing.T) {
	t.Parallel()
	b := s.wfSetup(t)
	inTx(t, b, func(tx store.Tx) error { return tx.InsertRun(b.ctx, wfRun(b, "run-1", "order")) })
	reserve := wfStep(b, "run-1", "reserve", 0, "run-1.reserve", "pending")
	charge := wfStep(b, "run-1", "charge", 0, "run-1.charge", "pending")
	inTx(t, b, func(tx store.Tx) error { return tx.PutSteps(b.ctx, []store.StepRecord{reserve, charge}) })
	_, steps, err := b.store.GetRun(b.ctx, "run-1")
	if err != nil {
		t.Fatal(err)
	}
	checkSteps(t, "inserted", steps, []store.StepRecord{charge, reserve})

	// Replaced by key: every field written; a skipped step has no task.
	b.clock.Advance(time.Second)
	reserve.State, reserve.Result, reserve.CompletedSeq, reserve.UpdatedAt = "succeeded", json.RawMessage(`{"slot":"A1"}`), 1, b.clock.Now()
	charge.TaskID, charge.State, charge.Error, charge.UpdatedAt = "", "skipped", "not reached", b.clock.Now()
	undo := wfStep(b, "run-1", "undo_reserve", 0, "run-1.undo_reserve", "pending")
	undo.CompensationOf = "reserve"
	inTx(t, b, func(tx store.Tx) error {
		return tx.PutSteps(b.ctx, []store.StepRecord{reserve, charge, undo})
	})
	_, steps, err = b.store.GetRun(b.ctx, "run-1")
	if err != nil {
		t.Fatal(err)
	}
	checkSteps(t, "replaced", steps, []store.StepRecord{charge, reserve, undo})

	// The same key twice in one call: the last row wins.
	first, last := wfStep(b, "run-1", "notify", 0, "run-1.notify", "pending"), wfStep(b, "run-1", "notify", 0, "run-1.notify", "succeeded")
	last.Result = json.RawMessage(`null`)
	inTx(t, b, func(tx store.Tx) error { return tx.PutSteps(b.ctx, []store.StepRecord{first, last}) })
	_, steps, err = b.store.GetRun(b.ctx, "run-1")
	if err != nil {
		t.Fatal(err)
	}
	checkSteps(t, "same key twice", steps, []store.StepRecord{charge, last, reserve, undo})

	// A task id another row holds: ErrConflict, nothing of the call written.
	clash := wfStep(b, "run-1", "other", 0, "run-1.reserve", "pending")
	fresh := wfStep(b, "run-1", "fresh", 0, "run-1.fresh", "pending")
	err = b.store.InTx(b.ctx, func(tx store.Tx) error { return tx.PutSteps(b.ctx, []store.StepRecord{fresh, clash}) })
	if !errors.Is(err, store.ErrConflict) {
		t.Fatalf("a step with another step's task id: %v, want ErrConflict", err)
	}
	_, steps, err = b.store.GetRun(b.ctx, "run-1")
	if err != nil {
		t.Fatal(err)
	}
	checkSteps(t, "after the clash", steps, []store.StepRecord{charge, last, reserve, undo})
	// Nothing to write is no error.
	inTx(t, b, func(tx store.Tx) error { return tx.PutSteps(b.ctx, nil) })

	// Many rows in one call (more than one statement's worth).
	var many []store.StepRecord
	for i := range 1201 {
		many = append(many, wfStep(b, "run-1", "fan", i, fmt.Sprintf("run-1.fan.%d", i), "pending"))
	}
	inTx(t, b, func(tx store.Tx) error { return tx.PutSteps(b.ctx, many) })
	_, steps, err = b.store.GetRun(b.ctx, "run-1")
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "rows after the fan-out", len(steps), 4+1201)

	// Rows without a task (a fan-out's items waiting for a slot) are no
	// clash, and each keeps its updated_at while another row of its step
	// is rewritten (a for_each budget counts from it).
	inTx(t, b, func(tx store.Tx) error { return tx.InsertRun(b.ctx, wfRun(b, "run-2", "order")) })
	w0, w1, w2 := wfStep(b, "run-2", "each", 0, "run-2.each.0", "pending"),
		wfStep(b, "run-2", "each", 1, "", "waiting"), wfStep(b, "run-2", "each", 2, "", "waiting")
	inTx(t, b, func(tx store.Tx) error { return tx.PutSteps(b.ctx, []store.StepRecord{w0, w1, w2}) })
	b.clock.Advance(time.Minute)
	w0.State, w0.Result, w0.CompletedSeq, w0.UpdatedAt = "succeeded", json.RawMessage(`1`), 1, b.clock.Now()
	w1.TaskID, w1.State, w1.UpdatedAt = "run-2.each.1", "pending", b.clock.Now()
	inTx(t, b, func(tx store.Tx) error { return tx.PutSteps(b.ctx, []store.StepRecord{w0, w1}) })
	_, steps, err = b.store.GetRun(b.ctx, "run-2")
	if err != nil {
		t.Fatal(err)
	}
	checkSteps(t, "waiting items", steps, []store.StepRecord{w0, w1, w2})
}

// wfRunInputsOfTasks: the run's input of each step task, read once per
// run; plain tasks, steps without a task and unknown ids are left out.
func (s *suite) wfRunInputsOfTasks(t *testing.T) {
	t.Parallel()
	b := s.wfSetup(t)
	r1, r2 := wfRun(b, "in-1", "order"), wfRun(b, "in-2", "order")
	r2.Input = json.RawMessage(`{"other":"\u00e9 <x>"}`)
	inTx(t, b, func(tx store.Tx) error {
		for _, r := range []store.RunRecord{r1, r2} {
			if err := tx.InsertRun(b.ctx, r); err != nil {
				return err
			}
		}
		return tx.PutSteps(b.ctx, []store.StepRecord{
			wfStep(b, "in-1", "each", 0, "in-1.each.0", "pending"),
			wfStep(b, "in-1", "each", 1, "in-1.each.1", "pending"),
			wfStep(b, "in-1", "skip", 0, "", "skipped"),
			wfStep(b, "in-2", "a", 0, "in-2.a", "succeeded"),
		})
	})
	got, err := b.store.RunInputsOfTasks(b.ctx, []string{"in-1.each.0", "in-1.each.1", "in-2.a", "plain", "in-1.each.9"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"in-1.each.0": string(r1.Input), "in-1.each.1": string(r1.Input), "in-2.a": string(r2.Input)}
	gotS := map[string]string{}
	for k, v := range got {
		var c bytes.Buffer
		if err := json.Compact(&c, v); err != nil {
			t.Fatalf("%s: %s: %v", k, v, err)
		}
		gotS[k] = c.String()
	}
	eq(t, "inputs of tasks", gotS, want)
	got, err = b.store.RunInputsOfTasks(b.ctx, nil)
	if err != nil || len(got) != 0 {
		t.Fatalf("no ids: %v %v", got, err)
	}
	got, err = b.store.RunInputsOfTasks(b.ctx, []string{"plain"})
	if err != nil || len(got) != 0 {
		t.Fatalf("no steps: %v %v", got, err)
	}
}

func (s *suite) wfStepsOfTasks(t *testing.T) {
	t.Parallel()
	b := s.wfSetup(t)
	rows := []store.StepRecord{
		wfStep(b, "run-1", "a", 0, "run-1.a", "succeeded"),
		wfStep(b, "run-1", "b", 0, "run-1.b", "pending"),
		wfStep(b, "run-1", "c", 0, "", "skipped"),
		wfStep(b, "run-2", "a", 0, "run-2.a", "pending"),
	}
	rows[0].Result = json.RawMessage(`[1,2]`)
	inTx(t, b, func(tx store.Tx) error {
		for _, id := range []string{"run-1", "run-2"} {
			if err := tx.InsertRun(b.ctx, wfRun(b, id, "order")); err != nil {
				return err
			}
		}
		return tx.PutSteps(b.ctx, rows)
	})
	sorted := func(steps []store.StepRecord) []store.StepRecord {
		sort.Slice(steps, func(i, j int) bool { return steps[i].TaskID < steps[j].TaskID })
		return steps
	}
	ids := []string{"run-2.a", "plain-task", "run-1.a", "run-1.zz", "run-1.b"}
	got, err := b.store.StepsOfTasks(b.ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	want := []store.StepRecord{rows[0], rows[1], rows[3]}
	checkSteps(t, "steps of tasks", sorted(got), want)
	got, err = b.store.StepsOfTasks(b.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "no ids", got, []store.StepRecord{})
	got, err = b.store.StepsOfTasks(b.ctx, []string{"plain-task"})
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "no steps", got, []store.StepRecord{})
	// And inside a transaction, which sees its own writes.
	inTx(t, b, func(tx store.Tx) error {
		late := wfStep(b, "run-2", "b", 0, "run-2.b", "pending")
		if err := tx.PutSteps(b.ctx, []store.StepRecord{late}); err != nil {
			return err
		}
		got, err := tx.StepsOfTasks(b.ctx, append(ids, "run-2.b"))
		if err != nil {
			return err
		}
		checkSteps(t, "steps of tasks in a transaction", sorted(got), []store.StepRecord{rows[0], rows[1], rows[3], late})
		got, err = tx.StepsOfTasks(b.ctx, []string{})
		if err != nil {
			return err
		}
		eq(t, "no ids in a transaction", got, []store.StepRecord{})
		return nil
	})
}

func (s *suite) wfGetRunOrdering(t *testing.T) {
	t.Parallel()
	b := s.wfSetup(t)
	// Written out of order; read by StepID (as bytes sort), then Item as a
	// number.
	var rows []store.StepRecord
	for _, k := range []struct {
		step string
		item int
	}{{"notify", 10}, {"charge", 0}, {"notify", 2}, {"Audit", 0}, {"notify", 0}, {"charge_2", 0}, {"charge-2", 0}} {
		rows = append(rows, wfStep(b, "run-1", k.step, k.item, fmt.Sprintf("run-1.%s.%d", k.step, k.item), "pending"))
	}
	inTx(t, b, func(tx store.Tx) error {
		if err := tx.InsertRun(b.ctx, wfRun(b, "run-1", "order")); err != nil {
			return err
		}
		// Another run's steps are not this one's.
		if err := tx.InsertRun(b.ctx, wfRun(b, "run-10", "order")); err != nil {
			return err
		}
		if err := tx.PutSteps(b.ctx, []store.StepRecord{wfStep(b, "run-10", "charge", 0, "run-10.charge", "pending")}); err != nil {
			return err
		}
		return tx.PutSteps(b.ctx, rows)
	})
	var want []string
	for _, k := range []string{"Audit 0", "charge 0", "charge-2 0", "charge_2 0", "notify 0", "notify 2", "notify 10"} {
		want = append(want, "run-1 "+k)
	}
	order := func(steps []store.StepRecord) []string {
		var out []string
		for _, st := range steps {
			out = append(out, fmt.Sprintf("%s %s %d", st.RunID, st.StepID, st.Item))
		}
		return out
	}
	_, steps, err := b.store.GetRun(b.ctx, "run-1")
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "GetRun order", order(steps), want)
	inTx(t, b, func(tx store.Tx) error {
		_, steps, err := tx.LockRun(b.ctx, "run-1")
		if err != nil {
			return err
		}
		eq(t, "LockRun order", order(steps), want)
		return nil
	})
}

func (s *suite) wfListRuns(t *testing.T) {
	t.Parallel()
	b := s.wfSetup(t)
	// Ids sort as they start (UUIDv7s do); states and workflows vary.
	states := []store.RunState{"running", "succeeded", "failed", "running", "compensating", "succeeded", "running"}
	inTx(t, b, func(tx store.Tx) error {
		for i, st := range states {
			wf := "order"
			if i%2 == 1 {
				wf = "billing"
			}
			r := wfRun(b, fmt.Sprintf("run-%02d", i), wf)
			r.State = st
			if err := tx.InsertRun(b.ctx, r); err != nil {
				return err
			}
		}
		return nil
	})
	list := func(f store.RunFilter) []string {
		t.Helper()
		runs, err := b.store.ListRuns(b.ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		out := []string{}
		for _, r := range runs {
			out = append(out, fmt.Sprintf("%s %s %s", r.RunID, r.Workflow, r.State))
		}
		return out
	}
	eq(t, "all, newest first", list(store.RunFilter{}), []string{
		"run-06 order running", "run-05 billing succeeded", "run-04 order compensating", "run-03 billing running",
		"run-02 order failed", "run-01 billing succeeded", "run-00 order running"})
	eq(t, "by workflow", list(store.RunFilter{Workflow: "billing"}), []string{
		"run-05 billing succeeded", "run-03 billing running", "run-01 billing succeeded"})
	eq(t, "by states", list(store.RunFilter{States: []store.RunState{"running", "failed"}}), []string{
		"run-06 order running", "run-03 billing running", "run-02 order failed", "run-00 order running"})
	eq(t, "workflow and state", list(store.RunFilter{Workflow: "order", States: []store.RunState{"running"}}), []string{
		"run-06 order running", "run-00 order running"})
	eq(t, "limit", list(store.RunFilter{Limit: 2}), []string{"run-06 order running", "run-05 billing succeeded"})
	eq(t, "cursor", list(store.RunFilter{BeforeID: "run-05", Limit: 2}), []string{
		"run-04 order compensating", "run-03 billing running"})
	eq(t, "cursor with filters", list(store.RunFilter{BeforeID: "run-03", Workflow: "order", States: []store.RunState{"running", "failed"}}),
		[]string{"run-02 order failed", "run-00 order running"})
	eq(t, "cursor at the end", list(store.RunFilter{BeforeID: "run-00"}), []string{})
	eq(t, "unknown workflow", list(store.RunFilter{Workflow: "nope"}), []string{})
	// Paging through all of them, two at a time, visits each once.
	var paged []string
	for cursor := ""; ; {
		runs, err := b.store.ListRuns(b.ctx, store.RunFilter{BeforeID: cursor, Limit: 2})
		if err != nil {
			t.Fatal(err)
		}
		if len(runs) == 0 {
			break
		}
		for _, r := range runs {
			paged = append(paged, r.RunID)
		}
		cursor = runs[len(runs)-1].RunID
	}
	eq(t, "paged", paged, []string{"run-06", "run-05", "run-04", "run-03", "run-02", "run-01", "run-00"})
	// The default limit is 100.
	inTx(t, b, func(tx store.Tx) error {
		for i := range 101 {
			if err := tx.InsertRun(b.ctx, wfRun(b, fmt.Sprintf("bulk-%03d", i), "bulk")); err != nil {
				return err
			}
		}
		return nil
	})
	eq(t, "default limit", len(list(store.RunFilter{Workflow: "bulk"})), 100)
}

// wfComposed is the transaction that advances a run as a step settles:
// the step's task succeeds, its successor is enqueued, the run and the
// step rows are written, and the engine's event appended.
func wfComposed(t *testing.T, b *bundle, step *backstop.Task) func(store.Tx) error {
	return func(tx store.Tx) error {
		now := b.clock.Now()
		applied, err := tx.Settle(b.ctx, []store.Settlement{{TaskID: step.ID, ExecutionID: step.ExecutionID,
			Outcome: bt.OutcomeSucceeded, FinishedAt: now, State: bt.StateSucceeded, Result: json.RawMessage(`{"slot":"A1"}`)}})
		if err != nil {
			return err
		}
		eq(t, "step settled", applied, []bool{true})
		got, err := tx.StepsOfTasks(b.ctx, []string{step.ID})
		if err != nil {
			return err
		}
		eq(t, "steps of the settled task", len(got), 1)
		run, steps, err := tx.LockRun(b.ctx, got[0].RunID)
		if err != nil {
			return err
		}
		eq(t, "locked steps", len(steps), 1)
		if _, err := tx.Enqueue(b.ctx, []*bt.Task{newTask(b, "run-1.charge", "wf")}, store.EnqueueOpts{}); err != nil {
			return err
		}
		// A second run starts in the same transaction.
		if err := tx.InsertRun(b.ctx, wfRun(b, "run-2", "order")); err != nil {
			return err
		}
		run.Seq, run.UpdatedAt = 1, now
		if err := tx.UpdateRun(b.ctx, *run); err != nil {
			return err
		}
		done := steps[0]
		done.State, done.Result, done.CompletedSeq, done.UpdatedAt = "succeeded", json.RawMessage(`{"slot":"A1"}`), 1, now
		if err := tx.PutSteps(b.ctx, []store.StepRecord{done, wfStep(b, "run-1", "charge", 0, "run-1.charge", "pending"),
			wfStep(b, "run-2", "reserve", 0, "run-2.reserve", "pending")}); err != nil {
			return err
		}
		return tx.AppendEvents(b.ctx, []bt.Event{store.NewEvent(now, "step.enqueued", "run.run-1", "wf", "k", "engine",
			[]byte(`{"step_id":"charge"}`))})
	}
}

// wfStarted: run-1 exists with its first step's task claimed.
func wfStarted(t *testing.T, b *bundle) *backstop.Task {
	t.Helper()
	inTx(t, b, func(tx store.Tx) error {
		if err := tx.InsertRun(b.ctx, wfRun(b, "run-1", "order")); err != nil {
			return err
		}
		if _, err := tx.Enqueue(b.ctx, []*bt.Task{newTask(b, "run-1.reserve", "wf")}, store.EnqueueOpts{}); err != nil {
			return err
		}
		return tx.PutSteps(b.ctx, []store.StepRecord{wfStep(b, "run-1", "reserve", 0, "run-1.reserve", "pending")})
	})
	got := claim(t, b, "wf", 1)
	if len(got) != 1 {
		t.Fatalf("claimed %d tasks, want the first step", len(got))
	}
	return got[0]
}

func wfCommit(t *testing.T, b *bundle, run runTx) {
	step := wfStarted(t, b)
	if err := run(b.ctx, wfComposed(t, b, step)); err != nil {
		t.Fatal(err)
	}
	eq(t, "step", b.get(step.ID).State, backstop.StateSucceeded)
	eq(t, "successor", b.get("run-1.charge").State, backstop.StatePending)
	r, steps, err := b.store.GetRun(b.ctx, "run-1")
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "run seq", r.Seq, int64(1))
	got := []string{}
	for _, st := range steps {
		got = append(got, fmt.Sprintf("%s %s %d", st.StepID, st.State, st.CompletedSeq))
	}
	eq(t, "steps", got, []string{"charge pending 0", "reserve succeeded 1"})
	jsonEq(t, "result", steps[1].Result, json.RawMessage(`{"slot":"A1"}`))
	if _, steps, err := b.store.GetRun(b.ctx, "run-2"); err != nil || len(steps) != 1 {
		t.Fatalf("second run: %v, %d steps", err, len(steps))
	}
	evs, err := b.c.Events(b.ctx, "run.run-1")
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "run events", len(evs), 1)
	eq(t, "run event", evs[0].Type, "step.enqueued")
}

// wfRollback: nothing of a rolled-back transaction remains: no run row, no
// step row, no task, no settlement.
func wfRollback(t *testing.T, b *bundle, run runTx) {
	step := wfStarted(t, b)
	if err := run(b.ctx, wfComposed(t, b, step)); err != nil {
		t.Fatal(err)
	}
	got := b.get(step.ID)
	eq(t, "step state", got.State, backstop.StateRunning)
	eq(t, "step execution", got.ExecutionID, step.ExecutionID)
	if _, err := b.c.Get(b.ctx, "run-1.charge"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("successor of a rolled-back transaction: %v", err)
	}
	if _, _, err := b.store.GetRun(b.ctx, "run-2"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("run of a rolled-back transaction: %v", err)
	}
	r, steps, err := b.store.GetRun(b.ctx, "run-1")
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "run seq", r.Seq, int64(0))
	eq(t, "steps", len(steps), 1)
	eq(t, "step row", steps[0].State, store.StepState("pending"))
	rest, err := b.store.StepsOfTasks(b.ctx, []string{"run-1.charge", "run-2.reserve"})
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "step rows of a rolled-back transaction", rest, []store.StepRecord{})
	runs, err := b.store.ListRuns(b.ctx, store.RunFilter{})
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "runs", len(runs), 1)
	evs, err := b.c.Events(b.ctx, "run.run-1")
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "run events", len(evs), 0)
}

// wfLockTurns: two transactions that lock the same run take turns. A locks
// the run and writes Seq 1; B, begun while A is open, waits (the probe sees
// it waiting) and returns from LockRun only after A committed, reading A's
// Seq and writing Seq 2. Without the lock B would read Seq 0 before A
// commits, and one increment would be lost.
func (s *suite) wfLockTurns(t *testing.T, lock func(context.Context, store.Tx, string) (*store.RunRecord, error)) {
	if s.lockWait == nil {
		t.Skip("the driver has no lock-wait probe")
	}
	t.Parallel()
	b := s.wfSetup(t)
	inTx(t, b, func(tx store.Tx) error { return tx.InsertRun(b.ctx, wfRun(b, "run-turns", "order")) })

	var mu sync.Mutex
	var log []string
	note := func(s string) {
		mu.Lock()
		log = append(log, s)
		mu.Unlock()
	}
	bump := func(name string, tx store.Tx) error {
		r, err := lock(b.ctx, tx, "run-turns")
		if err != nil {
			return err
		}
		note(fmt.Sprintf("%s locked seq %d", name, r.Seq))
		r.Seq++
		return tx.UpdateRun(b.ctx, *r)
	}
	aLocked, aRelease := make(chan struct{}), make(chan struct{})
	aDone, bDone := make(chan error, 1), make(chan error, 1)
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(aRelease) }) }
	defer release()
	go func() {
		err := b.store.InTx(b.ctx, func(tx store.Tx) error {
			if err := bump("A", tx); err != nil {
				return err
			}
			close(aLocked)
			<-aRelease
			note("A commits")
			return nil
		})
		aDone <- err
	}()
	select {
	case <-aLocked:
	case err := <-aDone:
		t.Fatalf("A ended early: %v", err)
	}
	go func() { bDone <- b.store.InTx(b.ctx, func(tx store.Tx) error { return bump("B", tx) }) }()
	// Wait until B waits for A (or B got through: the lock failed).
	deadline := time.Now().Add(20 * time.Second)
	for {
		waiting, err := s.lockWait(b.ctx, b.store)
		if err != nil {
			t.Fatal(err)
		}
		if waiting {
			break
		}
		select {
		case err := <-bDone:
			mu.Lock()
			seen := strings.Join(log, "; ")
			mu.Unlock()
			t.Fatalf("B's transaction ended (%v) while A held the run: %s", err, seen)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("timed out waiting for B to wait for A's lock")
		}
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	held := slices.Clone(log)
	mu.Unlock()
	eq(t, "while A holds the run", held, []string{"A locked seq 0"})
	release()
	if err := <-aDone; err != nil {
		t.Fatal(err)
	}
	if err := <-bDone; err != nil {
		t.Fatal(err)
	}
	eq(t, "turns", log, []string{"A locked seq 0", "A commits", "B locked seq 1"})
	r, _, err := b.store.GetRun(b.ctx, "run-turns")
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "seq after both", r.Seq, int64(2))
}
