// Package storetest is the conformance suite every store driver must pass.
// It drives the store both directly (claims, settlements, heartbeats) and
// through the engine (Client and Worker), so a behaviour the product
// promises — retries, timeouts, dead-lettering, cancellation — is proven on
// each store, not only on one.
//
// A driver's test calls Run with a function that opens a fresh, empty,
// migrated store for each test.
package storetest

import (
	"cmp"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/store"
)

// Opener returns a fresh, migrated store whose cleanup is registered on t.
type Opener func(t *testing.T) store.Store

// TxFunc begins a transaction on the driver's database that EnqueueTx
// accepts.
type TxFunc func(ctx context.Context, s store.Store) (tx any, commit, rollback func() error, err error)

type suite struct {
	open    Opener
	beginTx []namedTx
	boundTx []namedBoundTx // tx.go
	burnXid XidBurner
	// lockWait: workflows.go
	lockWait LockWaitProbe
}

// XidBurner brings a driver's transaction counter to just below the next
// power of ten (Postgres; drivers without transaction ids in cursors pass
// none): events written after it have cursors whose transaction part has
// one more digit than those written before.
type XidBurner func(ctx context.Context, s store.Store) error

// ErrXidTooFar is what an XidBurner returns (wrapped) when the next power
// of ten is too far to reach quickly (a long-lived server): the test that
// needs it skips, saying so.
var ErrXidTooFar = errors.New("the next power of ten of transaction ids is too far")

// WithXidBurner sets the driver's XidBurner for the cursor-order tests.
func WithXidBurner(f XidBurner) Option {
	return func(s *suite) { s.burnXid = f }
}

type namedTx struct {
	name  string
	begin TxFunc
}

// Option configures Run.
type Option func(*suite)

// WithTx adds a kind of caller transaction (e.g. "sql.Tx", "pgx.Tx") for the
// transactional-enqueue tests.
func WithTx(name string, f TxFunc) Option {
	return func(s *suite) { s.beginTx = append(s.beginTx, namedTx{name, f}) }
}

// Run runs the whole suite.
func Run(t *testing.T, open Opener, opts ...Option) {
	s := &suite{open: open}
	for _, o := range opts {
		o(s)
	}
	t.Run("Features", s.testFeatures) // features.go
	t.Run("Enqueue", s.testEnqueue)
	t.Run("EnqueueBatch", s.testEnqueueBatch)
	t.Run("UniqueFor", s.testUniqueFor) // unique_for.go: idempotency keys with a window
	t.Run("Debounce", s.testDebounce)   // debounce.go: merge keys that delay until quiet
	t.Run("Inputs", s.testInputs)       // inputs.go
	t.Run("Claim", s.testClaim)
	t.Run("Lease", s.testLease)
	t.Run("HeartbeatRacesSettle", s.testHeartbeatRacesSettle) // heartbeat_race.go
	t.Run("CancelWinsOverRetry", s.testCancelWinsOverRetry)
	t.Run("Worker", s.testWorker)
	t.Run("DeadLetters", s.testDeadLetters)
	t.Run("SummaryList", s.testSummaryList)       // summary.go
	t.Run("ExportInSlices", s.testExportInSlices) // summary.go
	t.Run("ByteOrder", s.testByteOrder)           // byte_order.go: lists page by the ids' bytes
	t.Run("Migrations", s.testMigrations)
	t.Run("DLQOps", s.testDLQOps)
	t.Run("DLQReopen", s.testDLQReopen)         // dlq_reopen.go
	t.Run("RedriveItems", s.testRedriveItems)   // redrive_items.go
	t.Run("RedriveRunner", s.testRedriveRunner) // redrive_runner.go
	t.Run("TaskActions", s.testTaskActions)     // task_actions.go
	t.Run("TaskJobs", s.testTaskJobs)           // task_jobs.go
	t.Run("Ops", s.testOps)
	t.Run("API", s.testAPI)
	t.Run("Queues", s.testQueues)
	t.Run("Limits", s.testLimits)     // limits.go
	t.Run("Fairness", s.testFairness) // fair.go: claims rotate across an attribute's values
	t.Run("Workers", s.testWorkers)
	t.Run("Logs", s.testLogs)
	t.Run("Events", s.testEvents)
	t.Run("AuditStream", s.testAuditStream) // audit.go
	t.Run("AuditStreamPages", s.testAuditStreamPages)
	t.Run("FairAudit", s.testFairAudit)
	t.Run("NextToken", s.testNextToken) // limitwake.go
	t.Run("Complexity", s.testComplexity)
	t.Run("Gauges", s.testGauges)
	t.Run("GaugesOpenDeadLetters", s.testGaugesOpenDeadLetters)
	t.Run("OrderingReplayFirst", s.testOrderingReplayFirst) // ordering_replay_first.go
	t.Run("Ordering", s.testOrdering)                       // ordering.go
	t.Run("RemoteLeases", s.testRemoteLeases)               // remote_leases.go
	// telemetry.go
	t.Run("Telemetry", s.testTelemetry)
	t.Run("Promises", s.testPromises) // promises.go
	t.Run("HeartbeatingWorkers", s.testHeartbeatingWorkers)
	t.Run("Tx", s.testTx)                             // tx.go: settle, enqueue and events composed in one transaction
	t.Run("Workflows", s.testWorkflows)               // workflows.go: definitions, runs and steps
	t.Run("Schedules", s.testSchedules)               // schedules.go: periodic tasks on a frozen clock
	t.Run("RelayCheckpoints", s.testRelayCheckpoints) // relay_checkpoints.go: the event-log relay's positions
	t.Run("IngestPositions", s.testIngestPositions)   // ingest_positions.go: the ingesters' reports
	t.Run("Where", s.testWhere)                       // where.go: filter by payload
	t.Run("WhereProperty", s.testWhereProperty)       // where.go: SQL and Go agree
	t.Run("WhereNumbers", s.testWhereNumbers)         // where_numbers.go: one numeric model
	t.Run("WhereIndex", s.testWhereIndex)             // where_index.go: the conditions a payload index answers
	t.Run("WhereBudget", s.testWhereBudget)           // where_budget.go: a spent budget refuses, bulk actions change nothing
	t.Run("WhereGo", s.testWhereGo)                   // where_go.go: counts and redrive by a Go-side where

	t.Run("ActivityRollup", s.testActivityRollup) // activity.go: the rollup's rows and watermark
}

// clock is real time plus an offset tests can move forward, so lease
// expiry and backoffs are tested without sleeping through them.
type clock struct {
	mu     sync.Mutex
	offset time.Duration
	frozen time.Time // when set, Now is frozen+offset: only Advance moves time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.frozen.IsZero() {
		return c.frozen.Add(c.offset)
	}
	return time.Now().Add(c.offset).UTC().Truncate(time.Microsecond)
}

// freeze stops the clock at the current time: a test whose steps are
// measured in Advance calls (a drain due in 10s) must not see a slow
// machine's real seconds pass between them.
func (c *clock) freeze() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.frozen.IsZero() {
		c.frozen = time.Now().Add(c.offset).UTC().Truncate(time.Microsecond)
		c.offset = 0
	}
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.offset += d
	c.mu.Unlock()
}

type bundle struct {
	t     *testing.T
	ctx   context.Context
	store store.Store
	clock *clock
	c     *backstop.Client
}

func (s *suite) setup(t *testing.T, cfg *backstop.Config) *bundle {
	t.Helper()
	st := s.open(t)
	if cfg == nil {
		cfg = &backstop.Config{}
	}
	clk := &clock{}
	cfg.Clock = clk
	if cfg.Logger == nil {
		cfg.Logger = discardLogger()
	}
	c, err := backstop.NewClient(st, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return &bundle{t: t, ctx: ctx, store: st, clock: clk, c: c}
}

func (b *bundle) enqueue(p backstop.EnqueueParams) *backstop.Task {
	b.t.Helper()
	r, err := b.c.Enqueue(b.ctx, p)
	if err != nil {
		b.t.Fatalf("enqueue: %v", err)
	}
	return r.Task
}

func (b *bundle) get(id string) *backstop.Task {
	b.t.Helper()
	task, err := b.c.Get(b.ctx, id)
	if err != nil {
		b.t.Fatalf("get %s: %v", id, err)
	}
	return task
}

func (b *bundle) count() int {
	b.t.Helper()
	ts, err := b.c.List(b.ctx, backstop.ListParams{Limit: 10000})
	if err != nil {
		b.t.Fatal(err)
	}
	return len(ts)
}

// worker starts a worker with fast polling; it is stopped at cleanup.
func (b *bundle) worker(cfg *backstop.WorkerConfig, handlers map[string]backstop.Handler) *backstop.Worker {
	b.t.Helper()
	if cfg == nil {
		cfg = &backstop.WorkerConfig{}
	}
	if cfg.Queues == nil {
		cfg.Queues = map[string]int{"default": 10}
	}
	cfg.PollInterval = cmp.Or(cfg.PollInterval, 50*time.Millisecond)
	cfg.MaintenanceInterval = cmp.Or(cfg.MaintenanceInterval, 100*time.Millisecond)
	w, err := backstop.NewWorker(b.c, cfg)
	if err != nil {
		b.t.Fatal(err)
	}
	for k, h := range handlers {
		w.Handle(k, h)
	}
	if err := w.Start(b.ctx); err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Stop(ctx)
	})
	return w
}

// waitState polls until the task reaches state (or fails the test).
func (b *bundle) waitState(id string, state backstop.State) *backstop.Task {
	b.t.Helper()
	var last *backstop.Task
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		last = b.get(id)
		if last.State == state {
			return last
		}
		time.Sleep(20 * time.Millisecond)
	}
	b.t.Fatalf("task %s: state %s, want %s (last error %q)", id, last.State, state, last.LastError)
	return nil
}

func outcomes(task *backstop.Task) []backstop.Outcome {
	out := make([]backstop.Outcome, len(task.Executions))
	for i, e := range task.Executions {
		out[i] = e.Outcome
	}
	return out
}
