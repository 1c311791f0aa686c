package pgstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/testdb"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/pgstore"
)

// roundTrips counts what a pool sends: statements, COPYs and pipelined
// batches (a batch is one round trip however many statements it holds).
type roundTrips struct{ queries, copies, batches atomic.Int64 }

func (r *roundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	r.batches.Add(1)
	return ctx
}
func (r *roundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (r *roundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// trips is the statements and batches sent so far.
func (r *roundTrips) trips() int64 { return r.queries.Load() + r.batches.Load() }

func (r *roundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	r.queries.Add(1)
	return ctx
}
func (r *roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (r *roundTrips) TraceCopyFromStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceCopyFromStartData) context.Context {
	r.copies.Add(1)
	return ctx
}
func (r *roundTrips) TraceCopyFromEnd(context.Context, *pgx.Conn, pgx.TraceCopyFromEndData) {}

// tracedStore is a migrated store on a fresh schema whose pool counts its
// round trips.
func tracedStore(t *testing.T) (*pgstore.Store, *roundTrips) {
	t.Helper()
	t.Parallel()
	cfg, err := pgxpool.ParseConfig(testdb.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	rt := &roundTrips{}
	cfg.ConnConfig.Tracer = rt
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close) // New does not take the pool over
	s := pgstore.New(pool)
	t.Cleanup(func() { _ = s.Close() })
	if err := s.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	return s, rt
}

func plainTasks(prefix string, n int) []*bt.Task {
	ts := make([]*bt.Task, n)
	for i := range ts {
		ts[i] = newTask("q")
		ts[i].ID = fmt.Sprintf("%s-%04d", prefix, i)
	}
	return ts
}

// A batch of tasks without keys is one COPY and a few statements, not a
// statement of 24,000 parameters; a batch of a few tasks stays one
// prepared INSERT.
func TestEnqueueBatchCopies(t *testing.T) {
	s, rt := tracedStore(t)
	q0, c0 := rt.queries.Load(), rt.copies.Load()
	enqueue(t, s, store.EnqueueOpts{}, plainTasks("big", 1000)...)
	if c := rt.copies.Load() - c0; c != 1 {
		t.Fatalf("a batch of 1,000 took %d COPYs, want 1", c)
	}
	// begin, the event row, notify, commit
	if q := rt.queries.Load() - q0; q > 4 {
		t.Fatalf("a batch of 1,000 took %d statements besides its COPY, want at most 4", q)
	}
	c0 = rt.copies.Load()
	enqueue(t, s, store.EnqueueOpts{}, plainTasks("small", 8)...)
	if c := rt.copies.Load() - c0; c != 0 {
		t.Fatalf("a batch of 8 took %d COPYs, want none", c)
	}
	n := countTasks(t, s)
	if n != 1008 {
		t.Fatalf("%d tasks, want 1008", n)
	}
}

// A COPY that meets a taken id aborts only the enqueue: in a caller's
// transaction (pgx, database/sql) the enqueue reports the id as a
// conflict, writes nothing, and the transaction goes on; in InTx it is
// the conflict that ends the transaction.
func TestEnqueueBatchCopyConflictInCallersTx(t *testing.T) {
	s, _ := tracedStore(t)
	ctx := t.Context()
	enqueue(t, s, store.EnqueueOpts{}, plainTasks("taken", 1)...)
	refused := func() []*bt.Task {
		ts := plainTasks("refused", 1000)
		ts[500].ID = "taken-0000"
		return ts
	}
	check := func(t *testing.T, err error) {
		t.Helper()
		if !errors.Is(err, store.ErrConflict) {
			t.Fatalf("a batch holding a taken id: %v, want ErrConflict", err)
		}
	}

	t.Run("pgx.Tx", func(t *testing.T) {
		tx, err := s.Pool().Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx) //nolint:errcheck // committed below
		_, err = s.EnqueueTx(ctx, tx, refused(), store.EnqueueOpts{})
		check(t, err)
		if _, err := s.EnqueueTx(ctx, tx, plainTasks("pgx", 1000), store.EnqueueOpts{}); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("sql.Tx", func(t *testing.T) {
		db := stdlib.OpenDBFromPool(s.Pool())
		defer db.Close()
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback() //nolint:errcheck // committed below
		_, err = s.EnqueueTx(ctx, tx, refused(), store.EnqueueOpts{})
		check(t, err)
		if _, err := s.EnqueueTx(ctx, tx, plainTasks("sql", 1000), store.EnqueueOpts{}); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("InTx", func(t *testing.T) {
		// InTx refuses every operation after a failed one: the
		// conflict is what it reports.
		err := s.InTx(ctx, func(tx store.Tx) error {
			_, err := tx.Enqueue(ctx, refused(), store.EnqueueOpts{})
			check(t, err)
			return err
		})
		check(t, err)
	})
	n := countTasks(t, s)
	if n != 2001 {
		t.Fatalf("%d tasks, want 2001 (none of the refused batches)", n)
	}
}

func countTasks(t *testing.T, s *pgstore.Store) int {
	t.Helper()
	var n int
	if err := s.Pool().QueryRow(t.Context(), "SELECT count(*) FROM backstop_tasks").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A batch of tasks with idempotency keys is one look-up of the keys and
// one INSERT, not two statements a task; its outcome is the one-at-a-time
// path's (storetest's EnqueueBatch compares the two in full).
func TestEnqueueBatchIdempotencyKeys(t *testing.T) {
	s, rt := tracedStore(t)
	old := plainTasks("old", 10)
	for i, tk := range old {
		tk.IdempotencyKey = fmt.Sprintf("key-%d", i)
	}
	enqueue(t, s, store.EnqueueOpts{}, old...)

	ts := plainTasks("new", 1000)
	for i, tk := range ts {
		switch {
		case i < 10:
			tk.IdempotencyKey = fmt.Sprintf("key-%d", i) // a live task's
		case i%4 == 0:
			tk.IdempotencyKey = fmt.Sprintf("key-%d", i-1) // the batch's own
		default:
			tk.IdempotencyKey = fmt.Sprintf("key-%d", i)
		}
	}
	q0 := rt.queries.Load()
	res := enqueue(t, s, store.EnqueueOpts{}, ts...)
	// begin, the look-up, the INSERT, the duplicates' events, notify, commit
	if q := rt.queries.Load() - q0; q > 6 {
		t.Fatalf("a batch of 1,000 keyed tasks took %d statements, want at most 6", q)
	}
	for i, r := range res {
		var want string
		switch {
		case i < 10:
			want = old[i].ID
		case i%4 == 0:
			want = ts[i-1].ID
		default:
			want = ts[i].ID
		}
		if r.Task.ID != want || r.Duplicate != (want != ts[i].ID) {
			t.Fatalf("task %d: got %s duplicate=%v, want %s", i, r.Task.ID, r.Duplicate, want)
		}
	}
	if n := countTasks(t, s); n != 10+1000-10-247 {
		t.Fatalf("%d tasks, want %d", n, 10+1000-10-247)
	}

	// A keyed task whose id is taken is a conflict naming it, as one at a
	// time; nothing of the batch is written.
	ts = plainTasks("again", 100)
	for i, tk := range ts {
		tk.IdempotencyKey = fmt.Sprintf("again-key-%d", i)
	}
	ts[50].ID = "old-0003"
	if _, err := s.Enqueue(t.Context(), ts, store.EnqueueOpts{}); !errors.Is(err, store.ErrConflict) || !strings.Contains(err.Error(), "old-0003") {
		t.Fatalf("a keyed batch holding a taken id: %v, want a conflict naming it", err)
	}
	if n := countTasks(t, s); n != 753 {
		t.Fatalf("%d tasks after the refused batch, want 753", n)
	}
}

// A copied batch's task.enqueued row writes the fields its tasks share
// once, in the row's common body, and each task's body holds only the
// rest; each task's event still reads back whole.
func TestCopiedEventsShareTheirCommonFields(t *testing.T) {
	s, _ := tracedStore(t)
	ctx := t.Context()
	same := plainTasks("same", 100)
	apart := plainTasks("apart", 100)
	for i, tk := range apart {
		tk.RunAt = tk.RunAt.Add(time.Duration(i) * time.Second) // run_at and what follows differ
	}
	enqueue(t, s, store.EnqueueOpts{}, same...)
	enqueue(t, s, store.EnqueueOpts{}, apart...)
	for _, c := range []struct {
		task         *bt.Task
		common, body string
	}{
		{same[7], `{"merged":false,"duplicate":false,"state":"pending","run_at":"` + same[7].RunAt.UTC().Format("2006-01-02T15:04:05.000000Z") + `","priority":0,"max_attempts":3}`, `{}`},
		{apart[7], `{"merged":false,"duplicate":false,"state":"pending"}`, `{"run_at":"` + apart[7].RunAt.UTC().Format("2006-01-02T15:04:05.000000Z") + `","priority":0,"max_attempts":3}`},
	} {
		var common, body string
		if err := s.Pool().QueryRow(ctx, `SELECT e.common::text, e.bodies->>7 FROM backstop_events e
			WHERE e.type = 'task.enqueued' AND $1 = ANY(e.subjects)`, c.task.ID).Scan(&common, &body); err != nil {
			t.Fatal(err)
		}
		if common != c.common || body != c.body {
			t.Fatalf("%s: common %s body %s, want %s and %s", c.task.ID, common, body, c.common, c.body)
		}
		evs, err := s.Events(ctx, c.task.ID)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]any{"merged": false, "duplicate": false, "state": "pending",
			"run_at": c.task.RunAt.UTC().Format("2006-01-02T15:04:05.000000Z"), "priority": 0.0, "max_attempts": 3.0}
		var got map[string]any
		if len(evs) != 1 || evs[0].Type != "task.enqueued" {
			t.Fatalf("%s: events %+v, want one task.enqueued", c.task.ID, evs)
		}
		if err := json.Unmarshal(evs[0].Body, &got); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: body %s, want %v", c.task.ID, evs[0].Body, want)
		}
		if !strings.HasPrefix(string(evs[0].Body), `{"merged":false,"duplicate":false,"state":"pending","run_at"`) {
			t.Fatalf("%s: body %s, not in the INSERT's field order", c.task.ID, evs[0].Body)
		}
	}
}

// A batch of ordered tasks writes their ordering rows by one statement,
// not one a task.
func TestOrderedBatchOneOrderingStatement(t *testing.T) {
	s, rt := tracedStore(t)
	ts := plainTasks("ordered", 100)
	for i, tk := range ts {
		tk.State, tk.OrderingKey, tk.Sequence = bt.StateBuffered, fmt.Sprintf("key-%d", i%3), int64(i/3+1)
	}
	n0 := rt.trips()
	enqueue(t, s, store.EnqueueOpts{}, ts...)
	// BEGIN with the event row, the ordering rows, COMMIT (and the COPY)
	if n := rt.trips() - n0; n > 3 {
		t.Fatalf("a batch of 100 ordered tasks took %d round trips besides its COPY, want at most 3", n)
	}
	var rows, keys, maxSeq int
	if err := s.Pool().QueryRow(t.Context(), `SELECT count(*), count(DISTINCT okey), max(seq) FROM backstop_ordering_tasks
		WHERE task_id LIKE 'ordered-%' AND status = 'held' AND queue = 'q'`).Scan(&rows, &keys, &maxSeq); err != nil {
		t.Fatal(err)
	}
	if rows != 100 || keys != 3 || maxSeq != 34 {
		t.Fatalf("%d ordering rows of %d keys up to seq %d, want 100 of 3 up to 34", rows, keys, maxSeq)
	}
}

// A copied batch writes every column as the INSERT writes it: the same
// tasks, each with every column the enqueue sets (and some without),
// enqueued once as a batch of 20 (one COPY) and once a task at a time
// (prepared INSERTs), read back alike, column for column, but for the id
// and event_links (the event rows differ).
func TestCopiedRowsEqualInserted(t *testing.T) {
	s, rt := tracedStore(t)
	at := time.Date(2026, 11, 28, 2, 3, 4, 123456789, time.FixedZone("x", 3600))
	deadline := at.Add(90*time.Minute + 999*time.Nanosecond)
	jitter := false
	tasks := func(prefix string) []*bt.Task {
		ts := make([]*bt.Task, 20)
		for i := range ts {
			tk := newTask("rows-" + prefix)
			tk.ID = fmt.Sprintf("%s-%02d", prefix, i)
			tk.Kind = "kind-é-" + fmt.Sprint(i%3)
			tk.Priority, tk.Attempt, tk.MaxAttempts = i-10, i%2, 1<<30+i
			tk.RunAt, tk.CreatedAt, tk.UpdatedAt = at.Add(time.Duration(i)*time.Hour), at.Add(-time.Duration(i)), at.Add(time.Microsecond)
			tk.Progress.Total, tk.Progress.Completed = i, i/2
			tk.Complexity = float64(i) / 3
			if i%2 == 0 {
				tk.State = bt.StateScheduled
				tk.Payload = json.RawMessage(fmt.Sprintf(`{"i": %d, "s": "ünï\u0001", "big": %s}`, i, strings.Repeat("1", 1+i*40)))
				tk.Attributes = map[string]string{"a": fmt.Sprint(i), "run_id": "r"}
				tk.Retry = &bt.RetryPolicy{Base: bt.Duration(time.Second), Factor: 1.5, Jitter: &jitter}
				tk.Deadline = &deadline
				tk.Timeout = bt.Duration(1500*time.Millisecond + time.Duration(i)*time.Nanosecond)
				tk.TraceParent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
				tk.ReplayedFrom = fmt.Sprintf("dead-%d", i)
			} else {
				tk.Payload = nil
			}
			ts[i] = tk
		}
		return ts
	}
	opts := store.EnqueueOpts{InlineLimit: 200} // the longer payloads spill
	c0 := rt.copies.Load()
	enqueue(t, s, opts, tasks("copied")...)
	if c := rt.copies.Load() - c0; c != 1 {
		t.Fatalf("the batch took %d COPYs, want 1", c)
	}
	for _, tk := range tasks("inserted") {
		enqueue(t, s, opts, tk)
	}
	if c := rt.copies.Load() - c0; c != 1 {
		t.Fatalf("single enqueues took %d COPYs, want none", c-1)
	}
	read := func(prefix string) []string {
		rows, err := s.Pool().Query(t.Context(), `SELECT (to_jsonb(t) - 'id' - 'event_links' || jsonb_build_object('queue', replace(t.queue, $1, '')))::text
	FROM backstop_tasks t WHERE queue = 'rows-' || $1 ORDER BY id`, prefix)
		if err != nil {
			t.Fatal(err)
		}
		got, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 20 {
			t.Fatalf("%s: %d rows, want 20", prefix, len(got))
		}
		return got
	}
	copied, inserted := read("copied"), read("inserted")
	for i := range copied {
		if copied[i] != inserted[i] {
			t.Errorf("task %d:\ncopied   %s\ninserted %s", i, copied[i], inserted[i])
		}
	}
	var spilled int
	if err := s.Pool().QueryRow(t.Context(), `SELECT count(*) FROM backstop_tasks WHERE queue LIKE 'rows-%' AND payload_spilled`).Scan(&spilled); err != nil {
		t.Fatal(err)
	}
	if spilled == 0 {
		t.Fatal("no payload spilled: the test does not cover spilling")
	}
}

// A copied batch holding a value its column cannot take is refused with
// the column named, and nothing of it is written.
func TestCopiedBatchOutOfRange(t *testing.T) {
	s, _ := tracedStore(t)
	ts := plainTasks("range", 20)
	ts[7].Priority = 1 << 33
	_, err := s.Enqueue(t.Context(), ts, store.EnqueueOpts{})
	if err == nil || !strings.Contains(err.Error(), "priority") {
		t.Fatalf("a priority of 2^33: %v, want an error naming priority", err)
	}
	if n := countTasks(t, s); n != 0 {
		t.Fatalf("%d tasks written, want none", n)
	}
}

// A copied batch's results and task.enqueued events are the INSERT's, for
// values the copied path encodes itself: the event row's arrays (ids,
// queues, kinds in UTF-8, creation times with nanoseconds in another zone)
// and its bodies with the fields every task shares written once (all six;
// run_at apart by nanoseconds within one microsecond, so still shared;
// run_at a microsecond apart; state apart), and the results' payloads,
// large ones on both sides of the spill boundary among them.
func TestCopiedEventsAndResultsEqualInserted(t *testing.T) {
	s, rt := tracedStore(t)
	ctx := t.Context()
	const limit = 4096
	opts := store.EnqueueOpts{InlineLimit: limit}
	at := time.Date(2026, 11, 28, 2, 3, 4, 123456789, time.FixedZone("x", -5*3600))
	payloads := []string{
		`{"s": "ünïcödé \"quoted\" \\ back\u00e9 😀", "n": -1.5e300, "deep": [[[{"a": [null, true, false]}]]]}`,
		`[]`, `"a string"`, `0`, `null`, `{"": ""}`,
		`{"big": "` + strings.Repeat("x", limit-11) + `"}`, // exactly the inline limit
		`{"big": "` + strings.Repeat("y", limit-10) + `"}`, // one byte over: spilled
		`{"big": "` + strings.Repeat("é", 40000) + `"}`,
	}
	for i := range payloads[:len(payloads)-3] {
		if !json.Valid([]byte(payloads[i])) {
			t.Fatalf("payload %d is not JSON", i)
		}
	}
	if n := len(payloads[6]); n != limit {
		t.Fatalf("the payload at the limit is %d bytes", n)
	}
	cases := []struct {
		name  string
		vary  func(i int, tk *bt.Task)
		spill bool
	}{
		{"shared", func(i int, tk *bt.Task) { tk.RunAt = at.Add(time.Duration(i % 1000)) }, false},
		{"runat", func(i int, tk *bt.Task) { tk.RunAt = at.Add(time.Duration(i) * time.Microsecond) }, false},
		{"state", func(i int, tk *bt.Task) {
			if i%3 == 0 {
				tk.State, tk.RunAt = bt.StateScheduled, at.Add(time.Hour)
			}
		}, true},
	}
	for _, c := range cases {
		tasks := func(prefix string) []*bt.Task {
			ts := make([]*bt.Task, 30)
			for i := range ts {
				tk := newTask("ev-" + c.name + "-" + prefix)
				tk.ID = fmt.Sprintf("%s-%s-%02d", c.name, prefix, i)
				tk.Kind = "kïnd-" + fmt.Sprint(i%2)
				tk.RunAt, tk.CreatedAt, tk.UpdatedAt = at, at.Add(time.Duration(i)*time.Nanosecond), at
				tk.Priority, tk.MaxAttempts = -3, 7
				if i%4 == 0 {
					tk.Attributes = map[string]string{"a": `"quoted" \ é`, "run_id": "r-" + fmt.Sprint(i)}
				}
				if c.spill {
					tk.Payload = json.RawMessage(payloads[i%len(payloads)])
				}
				c.vary(i, tk)
				ts[i] = tk
			}
			return ts
		}
		c0 := rt.copies.Load()
		copied := enqueue(t, s, opts, tasks("c")...)
		if n := rt.copies.Load() - c0; n != 1 {
			t.Fatalf("%s: the batch took %d COPYs, want 1", c.name, n)
		}
		var inserted []store.EnqueueResult
		for _, tk := range tasks("i") {
			inserted = append(inserted, enqueue(t, s, opts, tk)...)
		}
		if n := rt.copies.Load() - c0; n != 1 {
			t.Fatalf("%s: single enqueues took %d COPYs, want none", c.name, n-1)
		}
		for i := range copied {
			ct, it := *copied[i].Task, *inserted[i].Task
			ct.ID, ct.Queue, it.ID, it.Queue = "", "", "", ""
			if !reflect.DeepEqual(ct, it) {
				t.Errorf("%s: result %d:\ncopied   %+v\ninserted %+v", c.name, i, ct, it)
			}
			cevs, err := s.Events(ctx, copied[i].Task.ID)
			if err != nil {
				t.Fatal(err)
			}
			ievs, err := s.Events(ctx, inserted[i].Task.ID)
			if err != nil {
				t.Fatal(err)
			}
			if len(cevs) != 1 || len(ievs) != 1 {
				t.Fatalf("%s: task %d: %d and %d events, want one each", c.name, i, len(cevs), len(ievs))
			}
			ce, ie := cevs[0], ievs[0]
			if ce.Subject != copied[i].Task.ID || ce.Queue != copied[i].Task.Queue {
				t.Errorf("%s: task %d: event of %s in %s", c.name, i, ce.Subject, ce.Queue)
			}
			var cb, ib any
			if err := json.Unmarshal(ce.Body, &cb); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(ie.Body, &ib); err != nil {
				t.Fatal(err)
			}
			ce.ID, ce.Seq, ce.Cursor, ce.Subject, ce.Queue, ce.Body = "", 0, "", "", "", nil
			ie.ID, ie.Seq, ie.Cursor, ie.Subject, ie.Queue, ie.Body = "", 0, "", "", "", nil
			if !reflect.DeepEqual(ce, ie) || !reflect.DeepEqual(cb, ib) {
				t.Errorf("%s: task %d: event\ncopied   %+v %v\ninserted %+v %v", c.name, i, ce, cb, ie, ib)
			}
		}
	}
	var common string
	if err := s.Pool().QueryRow(ctx, `SELECT e.common::text FROM backstop_events e WHERE 'shared-c-00' = ANY(e.subjects)`).Scan(&common); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(common, `"max_attempts":7`) {
		t.Fatalf("run_at apart by nanoseconds: common body %s, want every field", common)
	}
}

// A copied enqueue's results are copies: a result's payload changed in
// place, or appended to, changes no other result's and not the task's it
// was enqueued from.
func TestCopiedResultsOwnTheirPayloads(t *testing.T) {
	s, _ := tracedStore(t)
	ts := plainTasks("own", 20)
	shared := json.RawMessage(`{"n": 1}`)
	for i, tk := range ts {
		tk.Payload = shared // one array for every task, as a producer may pass it
		if i == 3 {
			tk.Payload = nil // none: NULL, read back as nil
		}
	}
	res := enqueue(t, s, store.EnqueueOpts{}, ts...)
	res[0].Task.Payload[2] = 'X'
	grown := append(res[1].Task.Payload, "tail"...)
	grown[2] = 'Y'
	for i, r := range res {
		want := `{"n": 1}`
		switch i {
		case 0:
			want = `{"X": 1}`
		case 3:
			want = ``
		}
		if string(r.Task.Payload) != want || (i == 3) != (r.Task.Payload == nil) {
			t.Errorf("result %d: payload %q, want %q", i, r.Task.Payload, want)
		}
	}
	if string(shared) != `{"n": 1}` {
		t.Errorf("the tasks' payload became %q", shared)
	}
}
