package pgstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/testdb"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/pgstore"
)

// planNode is a node of EXPLAIN (FORMAT JSON).
type planNode struct {
	NodeType  string     `json:"Node Type"`
	Relation  string     `json:"Relation Name"`
	Index     string     `json:"Index Name"`
	Conflict  string     `json:"Conflict Resolution"`
	Loops     float64    `json:"Actual Loops"`
	Rows      float64    `json:"Actual Rows"`
	Operation string     `json:"Operation"`
	Hit       float64    `json:"Shared Hit Blocks"`
	Read      float64    `json:"Shared Read Blocks"`
	WALRecs   float64    `json:"WAL Records"`
	WALBytes  float64    `json:"WAL Bytes"`
	Plans     []planNode `json:"Plans"`
}

func (n planNode) each(f func(planNode)) {
	f(n)
	for _, c := range n.Plans {
		c.each(f)
	}
}

// TestRedriveBatchFastPathWork: the one-statement redrive batch replays
// its rows without a primary-key lookup per row (its UPDATE reaches the
// rows its pick locked by their tuple ids), looks up no ordering row for
// tasks that are not ordered, records each item's outcome with a plain
// insert, and writes its events as one log row each task links to (not a
// row each, which the GIN index on subjects would hold); an item an
// earlier attempt recorded for a task past the cursor still ends replayed
// (the batch takes the slow path, which updates it), each task replayed
// once. It logs each write's buffers and WAL.
func TestRedriveBatchFastPathWork(t *testing.T) {
	ctx := context.Background()
	s, err := pgstore.Open(ctx, testdb.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	const n = 300
	now := time.Now().UTC().Truncate(time.Microsecond)
	deadLetters(t, s, n, now)
	// The rest of a table that is not only these dead letters: waiting
	// tasks of another queue (on a table of a few pages a sequential scan
	// is the planner's cheapest way to anything).
	filler := make([]*bt.Task, 5000)
	for i := range filler {
		filler[i] = &bt.Task{ID: fmt.Sprintf("w-%05d", i), Queue: "other", Kind: "k", State: bt.StatePending, MaxAttempts: 1,
			Payload: json.RawMessage(`{}`), RunAt: now, CreatedAt: now, UpdatedAt: now}
	}
	if _, err := s.Enqueue(ctx, filler, store.EnqueueOpts{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pool().Exec(ctx, "ANALYZE backstop_tasks"); err != nil {
		t.Fatal(err)
	}
	later := now.Add(time.Second)
	rec, _, err := s.StartRedrive(ctx, store.Redrive{ID: "rd-1", Kind: store.JobRedrive, FilterKey: "k", Filter: json.RawMessage(`{}`),
		Snapshot: later, StartedAt: later})
	if err != nil {
		t.Fatal(err)
	}
	b := store.RedriveBatch{RedriveID: rec.ID, Filter: store.ListFilter{Queue: "rq"}, Snapshot: later, Limit: n,
		RunAt: later, State: bt.StatePending, Now: later, Actor: "test"}

	raw, err := s.ExplainRedriveBatch(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	var plans []struct {
		Plan planNode `json:"Plan"`
	}
	if err := json.Unmarshal([]byte(raw), &plans); err != nil || len(plans) != 1 {
		t.Fatalf("plan: %v\n%s", err, raw)
	}
	var updated, tidScans, itemInserts, eventRows float64
	plans[0].Plan.each(func(p planNode) {
		if p.NodeType == "ModifyTable" {
			t.Logf("%s %s: %v buffers, %v WAL records, %v WAL bytes", p.Operation, p.Relation, p.Hit+p.Read, p.WALRecs, p.WALBytes)
		}
		switch {
		case p.NodeType == "ModifyTable" && p.Operation == "Update" && p.Relation == "backstop_tasks":
			updated += p.Rows
			for _, c := range p.Plans {
				if c.NodeType == "Tid Scan" {
					tidScans++
				}
			}
		case p.Index == "backstop_tasks_pkey":
			t.Errorf("the batch looks its rows up by primary key (%s, %v loops)", p.NodeType, p.Loops)
		case p.Index == "backstop_ordering_tasks_pkey" && p.Loops > 0:
			t.Errorf("the batch looks up %v ordering rows for tasks that are not ordered", p.Loops)
		case p.NodeType == "ModifyTable" && p.Relation == "backstop_events":
			for _, c := range p.Plans {
				eventRows += c.Rows
			}
		case p.NodeType == "ModifyTable" && p.Relation == "backstop_redrive_items":
			itemInserts++
			if p.Conflict != "" {
				t.Errorf("each item's outcome is written with ON CONFLICT %s", p.Conflict)
			}
		}
	})
	if tidScans != 1 || itemInserts != 1 {
		t.Errorf("the batch's UPDATE reads %v Tid Scans, %v item inserts; want 1 each:\n%s", tidScans, itemInserts, raw)
	}
	if eventRows != 1 {
		t.Errorf("the batch writes its %d events as %v log rows; want one (linked from each task)", n, eventRows)
	}
	if updated != 0 && updated != n { // EXPLAIN ANALYZE of a CTE's UPDATE reports its rows on the node
		t.Errorf("the plan's UPDATE replayed %v rows; want %d", updated, n)
	}

	// An outcome recorded for a task past the cursor (an earlier attempt
	// at it failed): the batch still replays every task once, and the
	// item ends replayed.
	if err := s.RecordRedriveItem(ctx, store.RedriveItem{RedriveID: rec.ID, TaskID: "dl-0150", Outcome: store.OutcomeConflict,
		Detail: "then", At: later}, 1); err != nil {
		t.Fatal(err)
	}
	res, err := s.RedriveBatch(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	if res.Replayed != n || len(res.Conflicts) != 0 || res.LastID != "dl-0299" {
		t.Fatalf("batch: %+v; want %d replayed up to dl-0299", res, n)
	}
	items, err := s.RedriveItems(ctx, store.RedriveItemsQuery{RedriveID: rec.ID, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != n {
		t.Fatalf("%d items; want %d", len(items), n)
	}
	for _, it := range items {
		if it.Outcome != store.OutcomeReplayed {
			t.Errorf("item %s: %s; want replayed", it.TaskID, it.Outcome)
		}
	}
	for _, id := range []string{"dl-0000", "dl-0150", "dl-0299"} {
		tk, err := s.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if tk.State != bt.StatePending || tk.ReplayCount != 1 {
			t.Errorf("%s: %s, replayed %d times; want pending, once", id, tk.State, tk.ReplayCount)
		}
	}
}

// TestRedriveBatchFastPathOneRoundTrip: a batch the fast path takes is one
// round trip (its statement, outside a transaction block: no begin,
// savepoint, release or commit), and it replays its rows, records their
// items and advances the record as before.
func TestRedriveBatchFastPathOneRoundTrip(t *testing.T) {
	ctx := context.Background()
	s, rt := tracedStore(t)
	const n = 40
	now := time.Now().UTC().Truncate(time.Microsecond)
	tasks := deadLetters(t, s, n, now)
	later := now.Add(time.Second)
	rec, _, err := s.StartRedrive(ctx, store.Redrive{ID: "rd-1", Kind: store.JobRedrive, FilterKey: "k", Filter: json.RawMessage(`{}`),
		Snapshot: later, StartedAt: later})
	if err != nil {
		t.Fatal(err)
	}
	b := store.RedriveBatch{RedriveID: rec.ID, Filter: store.ListFilter{Queue: "rq"}, Snapshot: later, Limit: n / 2,
		RunAt: later, State: bt.StatePending, Now: later, Actor: "test"}
	for i, last := range []string{"dl-0019", "dl-0039"} {
		before := rt.trips()
		res, err := s.RedriveBatch(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		if trips := rt.trips() - before; trips != 1 {
			t.Errorf("batch %d: %d round trips; want 1", i, trips)
		}
		if res.Replayed != n/2 || res.LastID != last {
			t.Fatalf("batch %d: %+v; want %d replayed up to %s", i, res, n/2, last)
		}
		b.AfterID = res.LastID
	}
	items, err := s.RedriveItems(ctx, store.RedriveItemsQuery{RedriveID: rec.ID, Limit: 1000})
	if err != nil || len(items) != n {
		t.Fatalf("%d items, %v; want %d", len(items), err, n)
	}
	r, err := s.GetRedrive(ctx, rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	if r.Cursor != "dl-0039" || r.Replayed != n {
		t.Fatalf("record: cursor %q, %d replayed; want dl-0039, %d", r.Cursor, r.Replayed, n)
	}
	for _, tk := range tasks {
		if g, err := s.Get(ctx, tk.ID); err != nil || g.State != bt.StatePending || g.ReplayCount != 1 {
			t.Fatalf("%s: %+v, %v; want pending, replayed once", tk.ID, g, err)
		}
	}
}

// deadLetters makes n dead letters dl-0000… in queue rq, each enqueued,
// claimed and settled dead at now, and returns them as enqueued.
func deadLetters(t *testing.T, s *pgstore.Store, n int, now time.Time) []*bt.Task {
	t.Helper()
	ctx := context.Background()
	tasks := make([]*bt.Task, n)
	for i := range tasks {
		tasks[i] = &bt.Task{ID: fmt.Sprintf("dl-%04d", i), Queue: "rq", Kind: "k", State: bt.StatePending, MaxAttempts: 1,
			Payload: json.RawMessage(`{}`), RunAt: now, CreatedAt: now, UpdatedAt: now}
	}
	if _, err := s.Enqueue(ctx, tasks, store.EnqueueOpts{}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Claim(ctx, store.ClaimParams{Queue: "rq", WorkerID: "w", Max: n, Now: now, Lease: time.Minute})
	if err != nil || len(got) != n {
		t.Fatalf("claim: %d, %v", len(got), err)
	}
	ss := make([]store.Settlement, n)
	for i, tk := range got {
		ss[i] = store.Settlement{TaskID: tk.ID, ExecutionID: tk.ExecutionID, Outcome: bt.OutcomePermanentError, Error: "boom",
			FinishedAt: now, State: bt.StateDead, DeadReason: bt.ReasonPermanentError}
	}
	if _, err := s.Settle(ctx, ss); err != nil {
		t.Fatal(err)
	}
	return tasks
}

// TestRedriveRunnerOneRoundTripPerBatch: a bulk redrive's runner learns
// whether to go on (its record's runner and status) from the batch's own
// statement, so a fast batch is one round trip, with no read of the
// record after it.
func TestRedriveRunnerOneRoundTripPerBatch(t *testing.T) {
	ctx := context.Background()
	s, rt := tracedStore(t)
	const n, size = 40, 10
	now := time.Now().UTC().Truncate(time.Microsecond)
	deadLetters(t, s, n, now)
	c, err := backstop.NewClient(s, &backstop.Config{Logger: slog.New(slog.DiscardHandler), RedriveHeartbeat: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	var trips []int64
	res, err := c.Redrive(ctx, backstop.RedriveParams{Filter: backstop.ListParams{Queue: "rq"}, BatchSize: size},
		func(backstop.RedriveProgress) { trips = append(trips, rt.trips()) })
	if err != nil || res.Replayed != n {
		t.Fatalf("%+v, %v; want %d replayed", res, err, n)
	}
	// Reports: before the first batch, after each full batch, at the end.
	if len(trips) != n/size+2 {
		t.Fatalf("%d progress reports; want %d", len(trips), n/size+2)
	}
	for i := 2; i <= n/size; i++ {
		if d := trips[i] - trips[i-1]; d != 1 {
			t.Errorf("batch %d: %d round trips; want 1", i, d)
		}
	}
}

// TestRedriveBatchReplaysOnlyForItsRunner: a batch naming its runner
// replays nothing once the record is canceled or held by another runner,
// and reports the record as its statement found it.
func TestRedriveBatchReplaysOnlyForItsRunner(t *testing.T) {
	ctx := context.Background()
	s, _ := tracedStore(t)
	now := time.Now().UTC().Truncate(time.Microsecond)
	deadLetters(t, s, 6, now)
	later := now.Add(time.Second)
	rec, _, err := s.StartRedrive(ctx, store.Redrive{ID: "rd-g", Kind: store.JobRedrive, FilterKey: "g", Filter: json.RawMessage(`{}`),
		Snapshot: later, StartedAt: later})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := s.ClaimRedrive(ctx, store.RedriveClaim{ID: rec.ID, Runner: "r1", At: later}); err != nil || !ok {
		t.Fatalf("claim: %v, %v", ok, err)
	}
	b := store.RedriveBatch{RedriveID: rec.ID, Filter: store.ListFilter{Queue: "rq"}, Snapshot: later, Limit: 2,
		RunAt: later, State: bt.StatePending, Now: later, Actor: "test", Runner: "r1"}
	res, err := s.RedriveBatch(ctx, b)
	if err != nil || res.Replayed != 2 || res.Record == nil || *res.Record != (store.RedriveHolder{Runner: "r1", Status: "running"}) {
		t.Fatalf("r1's batch: %+v (record %+v), %v; want 2 replayed, r1 running", res, res.Record, err)
	}
	b.AfterID = res.LastID
	// An outcome recorded past the cursor (an earlier attempt's) sends the
	// next batch the slow way, which reports the record too.
	if _, err := s.Pool().Exec(ctx, `INSERT INTO backstop_redrive_items (redrive_id, task_id, outcome, detail, at)
		VALUES ($1, 'dl-0003', 'conflict', 'earlier', $2)`, rec.ID, later); err != nil {
		t.Fatal(err)
	}
	res, err = s.RedriveBatch(ctx, b)
	if err != nil || res.Replayed != 2 || res.LastID != "dl-0003" || res.Record == nil ||
		*res.Record != (store.RedriveHolder{Runner: "r1", Status: "running"}) {
		t.Fatalf("r1's slow batch: %+v (record %+v), %v; want 2 replayed up to dl-0003, r1 running", res, res.Record, err)
	}
	b.AfterID = res.LastID
	other := b
	other.Runner = "r2"
	res, err = s.RedriveBatch(ctx, other)
	if err != nil || res.Replayed != 0 || res.LastID != "" || res.Record == nil || res.Record.Runner != "r1" {
		t.Fatalf("r2's batch: %+v (record %+v), %v; want nothing replayed, held by r1", res, res.Record, err)
	}
	if ok, err := s.SetRedriveStatus(ctx, rec.ID, []string{"running"}, "canceled", later); err != nil || !ok {
		t.Fatalf("cancel: %v, %v", ok, err)
	}
	res, err = s.RedriveBatch(ctx, b)
	if err != nil || res.Replayed != 0 || res.LastID != "" || res.Record == nil || res.Record.Status != "canceled" {
		t.Fatalf("batch after the cancel: %+v (record %+v), %v; want nothing replayed, canceled", res, res.Record, err)
	}
	r, err := s.GetRedrive(ctx, rec.ID)
	if err != nil || r.Replayed != 4 || r.Cursor != "dl-0003" {
		t.Fatalf("record %+v, %v; want 4 replayed up to dl-0003", r, err)
	}
	dead, err := s.List(ctx, store.ListFilter{Queue: "rq", States: []bt.State{bt.StateDead}})
	if err != nil || len(dead) != 2 {
		t.Fatalf("%d dead letters left, %v; want 2", len(dead), err)
	}
}

// TestRedriveBatchFastPathEventRow: the fast batch's one event row holds
// its events in task id order, whatever the rows' order on disk; the fields
// every event of the batch shares are the row's common body, written once,
// and each element is the event's own fields; each event reads back with
// the body RedriveEvents writes on the slow path, byte for byte.
func TestRedriveBatchFastPathEventRow(t *testing.T) {
	ctx := context.Background()
	s, err := pgstore.Open(ctx, testdb.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	const n = 30
	now := time.Now().UTC().Truncate(time.Microsecond)
	tasks := deadLetters(t, s, n, now)
	// Rewrite the rows last to first, so that their order on disk (the
	// order the batch's UPDATE returns them in) is not their ids'.
	for i := n - 1; i >= 0; i-- {
		if _, err := s.Pool().Exec(ctx, `UPDATE backstop_tasks SET dead_count = dead_count WHERE id = $1`, tasks[i].ID); err != nil {
			t.Fatal(err)
		}
	}
	var disk []string
	if err := s.Pool().QueryRow(ctx, `SELECT array_agg(id ORDER BY ctid) FROM backstop_tasks`).Scan(&disk); err != nil {
		t.Fatal(err)
	}
	if disk[0] == tasks[0].ID {
		t.Fatalf("setup: the rows are on disk in id order: %v", disk)
	}
	later := now.Add(time.Second)
	rec, _, err := s.StartRedrive(ctx, store.Redrive{ID: "rd-1", Kind: store.JobRedrive, FilterKey: "k", Filter: json.RawMessage(`{}`),
		Snapshot: later, StartedAt: later})
	if err != nil {
		t.Fatal(err)
	}
	b := store.RedriveBatch{RedriveID: rec.ID, Filter: store.ListFilter{Queue: "rq"}, Snapshot: later, Limit: n,
		RunAt: later, State: bt.StatePending, Now: later, Actor: "test", KeepAttempts: true, Reason: `ops "cleanup" ü`}
	res, err := s.RedriveBatch(ctx, b)
	if err != nil || res.Replayed != n {
		t.Fatalf("batch: %+v, %v; want %d replayed", res, err, n)
	}

	var (
		ids, subjects []string
		common        *string
		bodies        string
	)
	if err := s.Pool().QueryRow(ctx, `SELECT ids, subjects, common::text, bodies::text FROM backstop_events WHERE type = 'dlq.replayed'`).
		Scan(&ids, &subjects, &common, &bodies); err != nil {
		t.Fatal(err)
	}
	for i := range subjects {
		if subjects[i] != tasks[i].ID || (i > 0 && ids[i] <= ids[i-1]) {
			t.Fatalf("the row's events are not in id order: subjects %v, ids %v", subjects, ids)
		}
	}
	if want := `{"redrive_id":"rd-1","patched":false,"keep_attempts":true}`; common == nil || *common != want {
		t.Errorf("the row's common body: %v; want %s", common, want)
	}
	var elems []json.RawMessage
	if err := json.Unmarshal([]byte(bodies), &elems); err != nil || len(elems) != n {
		t.Fatalf("bodies: %v, %s", err, bodies)
	}
	if want := `{"replay_count":1,"reason":"ops \"cleanup\" ü"}`; string(elems[0]) != want {
		t.Errorf("an element's body: %s; want %s", elems[0], want)
	}

	for i, tk := range tasks {
		want := store.RedriveEvents(b, []store.Redriven{{ID: tk.ID, Queue: tk.Queue, Kind: tk.Kind, ReplayCount: 1}}, nil)[0]
		evs, err := s.Events(ctx, tk.ID)
		if err != nil {
			t.Fatal(err)
		}
		var got *bt.Event
		for j := range evs {
			if evs[j].Type == "dlq.replayed" {
				got = &evs[j]
			}
		}
		if got == nil || string(got.Body) != string(want.Body) || got.ID != ids[i] || got.Actor != "test" || got.Queue != "rq" || got.Kind != "k" {
			t.Errorf("%s: dlq.replayed %+v; want body %s, id %s", tk.ID, got, want.Body, ids[i])
		}
	}
}
