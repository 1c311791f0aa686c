package pgstore

import (
	"cmp"
	"context"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"weak"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/probe"
	"github.com/backstophq/backstop/store"
)

// The claim cursor. The claim index (backstop_tasks_claim: queue, priority
// DESC, run_at, id, over pending rows) gets an entry per enqueued task, and
// a claim leaves that entry pointing at a row version that is no longer
// pending. Such an entry is removed (killed by a scan, deleted by vacuum)
// only once no snapshot can see the old version: while a long transaction
// holds its snapshot open, every task claimed since stays at the head of
// the index in exactly the order a claim scans, and a pick from the head
// walks all of them before it finds a pending task (a second and more
// after a million claims, docs/benchmarks.md).
//
// So a claimer remembers, in this process, where its last claim ended for
// each queue and claim shape (the kinds it claims): the (priority, run_at,
// id) of the last task it claimed in claim order. The next pick starts
// there, within that priority (an index range, past the dead head). A full
// pick from the head runs instead when there is no position yet, when the
// last claim came back short (alone: the queue had caught up, so a cursor
// pick would come back short too, and the tasks it took would wait for
// the full pick's round trip and commit before reaching their handlers;
// the walk is the same, the full pick ran in that claim anyway), when the
// cursor pick came back short (for the rest of the batch), and at least
// once per cursorPeriod, or ten times as long as the last full pick took
// when that is longer. A task that becomes claimable behind the position —
// a higher priority, an earlier run_at, a retry or a rescued lease placed
// before it, a row another claimer skipped and released — is claimed by
// the next full pick: within that period, not at the very next claim.
// Within one pick the claim order is as before.

// defaultCursorPeriod is how long a claimer trusts its cursor between two
// full picks (before the ten-times-a-full-pick stretch).
const defaultCursorPeriod = time.Second

// cursorFilter is the cursor pick's condition on the claim index, its
// parameters numbered from n: the position's priority, run_at and id.
func cursorFilter(n int) string {
	return "\n\t  AND priority = $" + strconv.Itoa(n) + " AND (run_at, id) > ($" + strconv.Itoa(n+1) + ", $" + strconv.Itoa(n+2) + ")"
}

// claimCursor is where the last claims of one queue and claim shape ended.
type claimCursor struct {
	mu       sync.Mutex
	set      bool
	priority int
	runAt    time.Time
	id       string
	fullAt   time.Time     // when the last full pick ended (this process's clock)
	fullTook time.Duration // how long it took
	short    bool          // the last claim came back short: the next is a full pick alone
}

// pickNote is what a pick tells its cursor once the claim committed.
type pickNote struct {
	c     *claimCursor
	full  bool
	short bool // fewer tasks than asked for
	ended time.Time
	took  time.Duration
	last  *bt.Task // the last picked task in claim order; nil for none
}

// cursorFor is the cursor of p's queue and kinds.
func (s *Store) cursorFor(p store.ClaimParams) *claimCursor {
	key := p.Queue
	if len(p.Kinds) > 0 {
		kinds := slices.Clone(p.Kinds)
		slices.Sort(kinds)
		key += "\x00" + strings.Join(kinds, "\x00")
	}
	if c, ok := s.cursors.Load(key); ok {
		return c.(*claimCursor)
	}
	c, _ := s.cursors.LoadOrStore(key, &claimCursor{})
	return c.(*claimCursor)
}

// position is the cursor's position when a cursor pick may run now.
func (c *claimCursor) position(period time.Duration) (priority int, runAt time.Time, id string, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.set || c.short || time.Since(c.fullAt) >= max(period, 10*c.fullTook) {
		return 0, time.Time{}, "", false
	}
	return c.priority, c.runAt, c.id, true
}

// record moves the cursor after the claim the note is of committed: a full
// pick sets it (it may move back, to a higher priority), a cursor pick
// only advances it.
func (n pickNote) record() {
	c := n.c
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.short = n.short
	if n.full {
		c.fullAt, c.fullTook = n.ended, n.took
	}
	if n.last == nil {
		return
	}
	if n.full || !c.set || claimOrder(c.priority, c.runAt, c.id, n.last) < 0 {
		c.set, c.priority, c.runAt, c.id = true, n.last.Priority, n.last.RunAt, n.last.ID
	}
}

// claimOrder compares a position with task t in claim order.
func claimOrder(priority int, runAt time.Time, id string, t *bt.Task) int {
	return cmp.Or(cmp.Compare(t.Priority, priority), runAt.Compare(t.RunAt), cmp.Compare(id, t.ID))
}

// pickClaim claims up to p.Max tasks of p's queue through q: from the
// cursor when it may, then from the head of the claim index for what the
// cursor pick did not fill. The note is recorded (note.record) once the
// claim committed. On an error after the cursor pick claimed tasks, those
// tasks are returned with the error (on the pool, they are claimed).
func (s *Store) pickClaim(ctx context.Context, q querier, p store.ClaimParams) ([]*bt.Task, pickNote, error) {
	c := s.cursorFor(p)
	note := pickNote{c: c}
	pc := probe.ClaimFrom(ctx) // nil unless the latency bench's stage probe runs
	args := []any{p.Queue, p.Now, p.Max, p.WorkerID, p.Now.Add(p.Lease)}
	var tasks []*bt.Task
	if prio, runAt, id, ok := c.position(s.cursorPeriod); ok {
		sql, cargs := s.hot(sqlClaimCursor), append(slices.Clone(args), prio, runAt, id)
		if len(p.Kinds) > 0 {
			sql, cargs = s.hot(sqlClaimCursorKinds), append(cargs, textArray(p.Kinds))
		}
		got, err := s.probedPick(ctx, q, pc, "cursor", sql, cargs...)
		if err != nil {
			return nil, note, err
		}
		tasks = got
		note.last = lastInClaimOrder(tasks)
		if len(tasks) >= p.Max {
			return tasks, note, nil
		}
	}
	start := time.Now()
	sql, fargs := s.hot(sqlClaim), args
	fargs[2] = p.Max - len(tasks)
	if len(p.Kinds) > 0 {
		sql, fargs = s.hot(sqlClaimKinds), append(fargs, textArray(p.Kinds))
	}
	got, err := s.probedPick(ctx, q, pc, "head", sql, fargs...)
	if err != nil {
		note.short = true
		return tasks, note, err
	}
	tasks = append(tasks, got...)
	note.full, note.ended = true, time.Now()
	note.took = note.ended.Sub(start)
	note.last = lastInClaimOrder(tasks)
	// A claim that came back short found the queue caught up: the next
	// one is likely short too, and a cursor pick before its pick from the
	// head would only hold the tasks it takes until that pick committed.
	note.short = len(tasks) < p.Max
	return tasks, note, nil
}

// probedPick is queryTasksOn, with the statement's times recorded in pc
// when the stage probe runs (internal/probe). On the pool it takes the
// connection itself, as Pool.Query does (which tells the wait for it
// apart); on the pool or in a transaction it runs the statement as the
// connection's own prepared statement, made again every claimPlanPeriod
// (freshPlan).
func (s *Store) probedPick(ctx context.Context, q querier, pc *probe.Claim, kind, sql string, args ...any) ([]*bt.Task, error) {
	pk := probe.Pick{Kind: kind, Acquire: time.Now()}
	if pool, ok := q.(*pgxpool.Pool); ok {
		conn, err := pool.Acquire(ctx)
		if err != nil {
			return nil, err
		}
		defer conn.Release()
		if err := s.freshPlan(ctx, conn.Conn(), sql); err != nil {
			return nil, err
		}
		q = conn
	} else if tx, ok := q.(pgx.Tx); ok { // the fair and limited claims
		if err := s.freshPlan(ctx, tx.Conn(), sql); err != nil {
			return nil, err
		}
	}
	pk.Acquired = time.Now()
	tasks, err := queryTasksOn(ctx, q, sql, args...)
	if pc == nil {
		return tasks, err
	}
	pk.Done = time.Now()
	for _, t := range tasks {
		pk.IDs = append(pk.IDs, t.ID)
	}
	pc.AddPick(pk)
	return tasks, err
}

// The claim's plan. A claim's UPDATE finds the rows its pick locked by
// ctid = ANY(the picked tids), which the planner takes for 10 tids: a Tid
// Scan (cost 40), or on a table of fewer than ~25 pages (~1,000 tasks) a
// scan of the whole table, cheaper there. Run as pgx runs a statement
// (prepared once per connection), the server plans its first five
// executions for their arguments and then makes the generic plan from the
// table's size at that moment and keeps it until a vacuum or an analyze of
// the table invalidates it: a connection that made it while the table was
// small (a new database, a quiet queue) scanned the whole table in every
// claim as the table grew, claims of 20-300 ms in bursts
// (docs/benchmarks.md, "The pickup's bursts of slow claims"). No form of the UPDATE
// was found whose generic plan refuses the scan of a small table (a join
// to the picked rows follows their estimate, which the statistics of a
// backlog make large: a hash join over the whole table), and planning
// every claim cost as much server time as its execution. So each
// connection prepares its claim statements itself and makes them again
// once they are as old as their period: a generic plan is at most that
// old, and the table at most that much bigger than the one it was made
// for. A connection's first statements are kept for a fifth of the period
// (1 s), then for the period: their generic plans are the ones made on the
// smallest table (a new database, a worker's first second), and kept for 5
// s they scanned a table that grew meanwhile to 5,000 tasks at 1,000/s
// (docs/benchmarks.md, "The claim's first plans made again after 1 s").
const claimPlanPeriod = 5 * time.Second

// connPlans is when one connection prepared each claim statement and how
// long it keeps it.
type connPlans struct {
	mu sync.Mutex
	at map[string]connPlan
}

// connPlan is one claim statement prepared on a connection: when, and for
// how long.
type connPlan struct {
	at     time.Time
	period time.Duration
}

// nextPlanPeriod is how long a claim statement is kept once prepared:
// max/5 the first time (prev 0), then max.
func nextPlanPeriod(prev, max time.Duration) time.Duration {
	if prev <= 0 {
		return max / 5
	}
	return max
}

// freshPlan prepares sql on c as c's own statement (pgx runs a statement
// prepared under its text by that statement) when c has not, or makes it
// again when it is older than its period (nextPlanPeriod).
func (s *Store) freshPlan(ctx context.Context, c *pgx.Conn, sql string) error {
	key := weak.Make(c)
	v, ok := s.claimPlans.Load(key)
	if !ok {
		var loaded bool
		v, loaded = s.claimPlans.LoadOrStore(key, &connPlans{at: map[string]connPlan{}})
		if !loaded {
			// Forget the connection once it is gone.
			runtime.AddCleanup(c, func(k weak.Pointer[pgx.Conn]) { s.claimPlans.Delete(k) }, key)
		}
	}
	cp := v.(*connPlans)
	cp.mu.Lock()
	defer cp.mu.Unlock()
	p, ok := cp.at[sql]
	if ok && time.Since(p.at) < p.period {
		return nil
	}
	if ok {
		if err := c.Deallocate(ctx, sql); err != nil {
			return err
		}
		delete(cp.at, sql)
	}
	if _, err := c.Prepare(ctx, sql, sql); err != nil {
		return err
	}
	cp.at[sql] = connPlan{at: time.Now(), period: nextPlanPeriod(p.period, s.claimPlanPeriod)}
	return nil
}

// lastInClaimOrder is the last of tasks in claim order, nil for none.
func lastInClaimOrder(tasks []*bt.Task) *bt.Task {
	var last *bt.Task
	for _, t := range tasks {
		if last == nil || claimOrder(last.Priority, last.RunAt, last.ID, t) < 0 {
			last = t
		}
	}
	return last
}

// ClaimCursor is where this process's claims of queue (with the given
// kinds, none for any) last ended in claim order: the position its next
// cursor pick starts after; ok is false before its first claim.
func (s *Store) ClaimCursor(queue string, kinds ...string) (priority int, runAt time.Time, id string, ok bool) {
	c := s.cursorFor(store.ClaimParams{Queue: queue, Kinds: kinds})
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.priority, c.runAt, c.id, c.set
}
