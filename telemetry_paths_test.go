package backstop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/remote"
	"github.com/backstophq/backstop/internal/testclock"
	"github.com/backstophq/backstop/internal/testmetric"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/sqlitestore"
)

// The lifecycle paths that do not end in an in-process worker's
// settlement: lease expiry (Maintain), remote completions and failures,
// batched completions, and stale reports that must not count.

// stepClock is a clock tests move by hand.
// newClockHarness is a client (no worker) on a real SQLite file with a
// hand-moved clock, a manual metric reader and an in-memory span recorder.
func newClockHarness(t *testing.T) (*telHarness, *testclock.Clock) {
	return newClockHarnessOn(t, nil)
}

func newClockHarnessOn(t *testing.T, wrap func(store.Store) store.Store) (*telHarness, *testclock.Clock) {
	t.Helper()
	var s store.Store
	s, err := sqlitestore.Open(filepath.Join(t.TempDir(), "backstop.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	if wrap != nil {
		s = wrap(s)
	}
	clk := testclock.At(time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC))
	reader := sdkmetric.NewManualReader()
	sr := tracetest.NewSpanRecorder()
	c, err := NewClient(s, &Config{
		Clock:          clk,
		Logger:         slog.New(slog.DiscardHandler),
		MeterProvider:  sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
		TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr)),
		Retry:          &RetryPolicy{Schedule: []bt.Duration{0}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return &telHarness{t: t, c: c, reader: reader, spans: sr}, clk
}

func (h *telHarness) claimRemote(n int) []remote.Lease {
	h.t.Helper()
	ts, err := remote.New(h.c.e).Claim(context.Background(), remote.Claim{Queues: []string{"q"}, WorkerID: "remote-1", Max: n, Lease: 10 * time.Second})
	if err != nil {
		h.t.Fatal(err)
	}
	if len(ts) != n {
		h.t.Fatalf("claimed %d tasks, want %d", len(ts), n)
	}
	return ts
}

// processSpans returns the ended `process q` spans by execution id.
func (h *telHarness) processSpans() map[string]sdktrace.ReadOnlySpan {
	out := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range h.spans.Ended() {
		if s.Name() != "process q" {
			continue
		}
		for _, kv := range s.Attributes() {
			if kv.Key == "backstop.execution_id" {
				out[kv.Value.AsString()] = s
			}
		}
	}
	return out
}

func spanAttr(s sdktrace.ReadOnlySpan, key string) string {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value.Emit()
		}
	}
	return ""
}

// Lease expiry: a remote attempt whose worker went silent is settled by
// Maintain as lease_expired, counted once (retry, then dead letter), with
// its duration from the attempt's start; a second Maintain and the silent
// worker's late report change nothing and count nothing.
func TestTelemetryLeaseExpiry(t *testing.T) {
	h, clk := newClockHarness(t)
	ctx := context.Background()
	id := h.enqueue(EnqueueParams{Queue: "q", Kind: "k", MaxAttempts: 2, Attributes: map[string]string{"run_id": "r9"}})

	first := h.claimRemote(1)[0]
	clk.Advance(2 * time.Minute)
	if err := Maintain(ctx, h.c); err != nil {
		t.Fatal(err)
	}
	if err := Maintain(ctx, h.c); err != nil { // nothing left to settle
		t.Fatal(err)
	}
	// The worker wakes up and reports: its lease is gone.
	if _, err := remote.New(h.c.e).Complete(ctx, id, first.LeaseToken, nil, nil); !errors.Is(err, remote.ErrLeaseNotCurrent) {
		t.Fatalf("late complete: %v, want remote.ErrLeaseNotCurrent", err)
	}
	if _, err := remote.New(h.c.e).Fail(ctx, remote.Failure{TaskID: id, LeaseToken: first.LeaseToken, Outcome: bt.OutcomeTransientError}); !errors.Is(err, remote.ErrLeaseNotCurrent) {
		t.Fatalf("late fail: %v, want remote.ErrLeaseNotCurrent", err)
	}
	expect(t, h.metrics(), map[string]map[string]int64{
		"backstop.attempts":      {"kind=k,outcome=lease_expired,queue=q": 1},
		"backstop.task.duration": {"kind=k,outcome=lease_expired,queue=q": 1},
		"backstop.retries":       {qk: 1},
		"backstop.dead_letters":  {},
	})

	second := h.claimRemote(1)[0]
	clk.Advance(2 * time.Minute)
	if err := Maintain(ctx, h.c); err != nil {
		t.Fatal(err)
	}
	m := h.metrics()
	expect(t, m, map[string]map[string]int64{
		"backstop.attempts":      {"kind=k,outcome=lease_expired,queue=q": 2},
		"backstop.task.duration": {"kind=k,outcome=lease_expired,queue=q": 2},
		"backstop.retries":       {qk: 1},
		"backstop.dead_letters":  {qk + ",reason=attempts_exhausted,too_complex=false": 1},
		"messaging.process.duration": {"error.type=lease_expired,messaging.destination.name=q," +
			"messaging.operation.name=process,messaging.system=backstop": 2},
	})
	if tk, _ := h.c.Get(ctx, id); tk.State != bt.StateDead {
		t.Fatalf("task %s, want dead", tk.State)
	}
	// The duration is the attempt's: from its claim to the expiry
	// settlement, 2 minutes on the test's clock.
	if sum := h.durationSum("backstop.task.duration"); sum != 240 {
		t.Errorf("duration sum %v s, want 240 (two attempts of 120 s)", sum)
	}

	// Each remote attempt has its span, ended by the expiry.
	spans := h.processSpans()
	for _, ex := range []*Task{first.Task, second.Task} {
		s := spans[ex.ExecutionID]
		if s == nil {
			t.Fatalf("no process span for attempt %d (%v)", ex.Attempt, spanNames(h.spans.Ended()))
		}
		if got := spanAttr(s, "backstop.outcome"); got != "lease_expired" {
			t.Errorf("attempt %d outcome %q", ex.Attempt, got)
		}
		if spanAttr(s, "error.type") != "lease_expired" || s.Status().Code != codes.Error {
			t.Errorf("attempt %d: error.type %q status %v", ex.Attempt, spanAttr(s, "error.type"), s.Status())
		}
		if spanAttr(s, "run_id") != "r9" || spanAttr(s, "backstop.attempt") != itoa(ex.Attempt) {
			t.Errorf("attempt %d attributes %v", ex.Attempt, s.Attributes())
		}
		if !s.StartTime().Equal(*ex.AttemptedAt) || s.EndTime().Sub(s.StartTime()) != 2*time.Minute {
			t.Errorf("attempt %d span %v .. %v, want from %v for 2m", ex.Attempt, s.StartTime(), s.EndTime(), ex.AttemptedAt)
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// histograms is the sum of each series of a histogram, by label set.
func (h *telHarness) histograms(name string) map[string]float64 {
	h.t.Helper()
	var rm metricdata.ResourceMetrics
	if err := h.reader.Collect(context.Background(), &rm); err != nil {
		h.t.Fatal(err)
	}
	out := map[string]float64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if d, ok := m.Data.(metricdata.Histogram[float64]); ok && m.Name == name {
				for _, p := range d.DataPoints {
					out[testmetric.Labels(p.Attributes)] += p.Sum
				}
			}
		}
	}
	return out
}

// durationSum is the sum of a histogram's observations, all series.
func (h *telHarness) durationSum(name string) float64 {
	h.t.Helper()
	var sum float64
	for _, p := range h.histograms(name) {
		sum += p
	}
	return sum
}

// Remote completion (single and batched) and failure: counted once each
// with the attempt's duration, the failure's retry and dead letter too;
// a duplicate report counts nothing; the span of each attempt starts at
// its claim, is linked to the creation context and ends with the outcome.
func TestTelemetryRemoteSettlements(t *testing.T) {
	h, clk := newClockHarness(t)
	ctx := context.Background()
	var ids []string
	for range 5 {
		ids = append(ids, h.enqueue(EnqueueParams{Queue: "q", Kind: "k", MaxAttempts: 2, Attributes: map[string]string{"plan_hash": "ph1"}}))
	}
	ts := h.claimRemote(5)
	clk.Advance(3 * time.Second)
	// One completion alone, two in a batch (plus one stale item).
	if _, err := remote.New(h.c.e).Complete(ctx, ts[0].ID, ts[0].LeaseToken, nil, nil); err != nil {
		t.Fatal(err)
	}
	outs, err := remote.New(h.c.e).CompleteMany(ctx, []remote.Completion{{TaskID: ts[1].ID, LeaseToken: ts[1].LeaseToken},
		{TaskID: ts[2].ID, LeaseToken: ts[2].LeaseToken}, {TaskID: ts[0].ID, LeaseToken: ts[0].LeaseToken}})
	if err != nil {
		t.Fatal(err)
	}
	if outs[0].Err != nil || outs[1].Err != nil || !errors.Is(outs[2].Err, remote.ErrLeaseNotCurrent) {
		t.Fatalf("batch outcomes %+v", outs)
	}
	// A duplicate of the first completion.
	if _, err := remote.New(h.c.e).Complete(ctx, ts[0].ID, ts[0].LeaseToken, nil, nil); !errors.Is(err, remote.ErrLeaseNotCurrent) {
		t.Fatalf("duplicate complete: %v", err)
	}
	// A transient failure (retry) and a permanent one (dead letter).
	if _, err := remote.New(h.c.e).Fail(ctx, remote.Failure{TaskID: ts[3].ID, LeaseToken: ts[3].LeaseToken, Outcome: bt.OutcomeTransientError, Error: "503"}); err != nil {
		t.Fatal(err)
	}
	if _, err := remote.New(h.c.e).Fail(ctx, remote.Failure{TaskID: ts[4].ID, LeaseToken: ts[4].LeaseToken, Outcome: bt.OutcomePermanentError, Error: "bad"}); err != nil {
		t.Fatal(err)
	}
	m := h.metrics()
	expect(t, m, map[string]map[string]int64{
		"backstop.attempts": {"kind=k,outcome=succeeded,queue=q": 3, "kind=k,outcome=transient_error,queue=q": 1,
			"kind=k,outcome=permanent_error,queue=q": 1},
		"backstop.task.duration": {"kind=k,outcome=succeeded,queue=q": 3, "kind=k,outcome=transient_error,queue=q": 1,
			"kind=k,outcome=permanent_error,queue=q": 1},
		"backstop.retries":      {qk: 1},
		"backstop.dead_letters": {qk + ",reason=permanent_error,too_complex=false": 1},
		"backstop.claims":       {"queue=q,result=ok": 1},
	})
	if sum := h.durationSum("backstop.task.duration"); sum != 15 {
		t.Errorf("duration sum %v s, want 15 (five attempts of 3 s)", sum)
	}

	spans := h.processSpans()
	var send = map[trace.SpanID]bool{}
	for _, s := range h.spans.Ended() {
		if s.Name() == "send q" {
			send[s.SpanContext().SpanID()] = true
		}
	}
	want := map[int]string{0: "succeeded", 1: "succeeded", 2: "succeeded", 3: "transient_error", 4: "permanent_error"}
	for i, tk := range ts {
		s := spans[tk.ExecutionID]
		if s == nil {
			t.Fatalf("no span for task %d", i)
		}
		if s.SpanKind() != trace.SpanKindConsumer || spanAttr(s, "backstop.outcome") != want[i] ||
			spanAttr(s, "messaging.message.id") != tk.ID || spanAttr(s, "plan_hash") != "ph1" ||
			spanAttr(s, "messaging.system") != "backstop" || spanAttr(s, "messaging.destination.name") != "q" {
			t.Errorf("task %d span %v %v", i, s.SpanKind(), s.Attributes())
		}
		if (want[i] != "succeeded") != (s.Status().Code == codes.Error) {
			t.Errorf("task %d status %v", i, s.Status())
		}
		if len(s.Links()) != 1 || !send[s.Links()[0].SpanContext.SpanID()] || !send[s.Parent().SpanID()] {
			t.Errorf("task %d span not linked to / child of its send span: links %v parent %v", i, s.Links(), s.Parent())
		}
		if s.EndTime().Sub(s.StartTime()) != 3*time.Second {
			t.Errorf("task %d span lasts %v, want 3s", i, s.EndTime().Sub(s.StartTime()))
		}
	}
	if n := len(spans); n != 5 {
		t.Errorf("%d process spans, want 5", n)
	}
	_ = ids
}

// A completion this process did not hand out (another server, or one
// before a restart) is still counted, with the attempt's duration, from
// the store.
func TestTelemetryRemoteCompletionClaimedElsewhere(t *testing.T) {
	h, clk := newClockHarness(t)
	ctx := context.Background()
	other, err := NewClient(h.c.store, &Config{Clock: clk, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	h.enqueue(EnqueueParams{Queue: "q", Kind: "k"})
	ls, err := remote.New(other.e).Claim(ctx, remote.Claim{Queues: []string{"q"}, WorkerID: "remote-1", Max: 1, Lease: 10 * time.Second})
	if err != nil || len(ls) != 1 {
		t.Fatal(err, ls)
	}
	tk := ls[0] // claimed through another process
	clk.Advance(4 * time.Second)
	if _, err := remote.New(h.c.e).Complete(ctx, tk.ID, tk.LeaseToken, nil, nil); err != nil {
		t.Fatal(err)
	}
	expect(t, h.metrics(), map[string]map[string]int64{
		"backstop.attempts":      {"kind=k,outcome=succeeded,queue=q": 1},
		"backstop.task.duration": {"kind=k,outcome=succeeded,queue=q": 1},
	})
	if sum := h.durationSum("backstop.task.duration"); sum != 4 {
		t.Errorf("duration sum %v, want 4", sum)
	}
}

// An in-process attempt whose lease expired is counted once, as
// lease_expired by maintenance; the worker's late result does not count.
func TestTelemetryInProcessLeaseExpiredOnce(t *testing.T) {
	h, clk := newClockHarness(t)
	ctx := context.Background()
	running := make(chan struct{})
	finish := make(chan struct{})
	w, err := NewWorker(h.c, &WorkerConfig{Queues: map[string]int{"q": 1}, Lease: time.Hour,
		HeartbeatInterval: 30 * time.Minute, PollInterval: 20 * time.Millisecond, MaintenanceInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("k", HandlerFunc(func(ctx context.Context, _ *Task) error {
		close(running)
		<-finish
		return nil
	}))
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	id := h.enqueue(EnqueueParams{Queue: "q", Kind: "k", MaxAttempts: 1})
	<-running
	clk.Advance(2 * time.Hour)
	if err := Maintain(ctx, h.c); err != nil {
		t.Fatal(err)
	}
	close(finish) // the handler returns after its lease was settled
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if tk, _ := h.c.Get(ctx, id); tk.State != bt.StateDead {
		t.Fatalf("task %s, want dead (lease expired, attempts used up)", tk.State)
	}
	expect(t, h.metrics(), map[string]map[string]int64{
		"backstop.attempts":     {"kind=k,outcome=lease_expired,queue=q": 1},
		"backstop.dead_letters": {qk + ",reason=attempts_exhausted,too_complex=false": 1},
	})
	// The worker's span for the attempt ends abandoned, not succeeded.
	for _, s := range h.processSpans() {
		if spanAttr(s, "backstop.outcome") == "succeeded" {
			t.Errorf("span of the expired attempt says succeeded")
		}
	}
}

// Deadlines that pass while a task waits are dead letters (reason
// expired) though no attempt ran.
func TestTelemetryDeadlineDeadLetter(t *testing.T) {
	h, clk := newClockHarness(t)
	ctx := context.Background()
	dl := clk.Now().Add(time.Minute)
	h.enqueue(EnqueueParams{Queue: "q", Kind: "k", Deadline: dl})
	clk.Advance(2 * time.Minute)
	if err := Maintain(ctx, h.c); err != nil {
		t.Fatal(err)
	}
	if err := Maintain(ctx, h.c); err != nil {
		t.Fatal(err)
	}
	expect(t, h.metrics(), map[string]map[string]int64{
		"backstop.attempts":     {},
		"backstop.dead_letters": {qk + ",reason=expired,too_complex=false": 1},
	})
}

// raceSettleStore settles the first expired lease it lists itself, as a
// second maintenance loop in another process would between the listing
// and the settlement.
type raceSettleStore struct {
	store.Store
	raced bool
}

func (r *raceSettleStore) ExpiredLeases(ctx context.Context, now time.Time, limit int) ([]*Task, error) {
	ts, err := r.Store.ExpiredLeases(ctx, now, limit)
	if err == nil && len(ts) > 0 && !r.raced {
		r.raced = true
		oks, err := r.Store.Settle(ctx, []store.Settlement{{TaskID: ts[0].ID, ExecutionID: ts[0].ExecutionID,
			Outcome: bt.OutcomeLeaseExpired, FinishedAt: now, State: bt.StateDead, DeadReason: bt.ReasonAttemptsExhausted}})
		if err != nil || !oks[0] {
			return nil, fmt.Errorf("racing settlement: %v %v", oks, err)
		}
	}
	return ts, err
}

// A lease another maintenance loop settled first is not counted again.
func TestTelemetryLeaseExpiryRacedNotCounted(t *testing.T) {
	h, clk := newClockHarnessOn(t, func(s store.Store) store.Store { return &raceSettleStore{Store: s} })
	ctx := context.Background()
	h.enqueue(EnqueueParams{Queue: "q", Kind: "k", MaxAttempts: 1})
	h.enqueue(EnqueueParams{Queue: "q", Kind: "k", MaxAttempts: 1})
	h.claimRemote(2)
	clk.Advance(time.Minute)
	if err := Maintain(ctx, h.c); err != nil {
		t.Fatal(err)
	}
	expect(t, h.metrics(), map[string]map[string]int64{
		"backstop.attempts":     {"kind=k,outcome=lease_expired,queue=q": 1},
		"backstop.dead_letters": {qk + ",reason=attempts_exhausted,too_complex=false": 1},
	})
}

// A remote attempt this process handed out but another process settled
// (here: a second Client on the same store, as another `serve`) is not
// counted here; its span ends, once its lease is long over, with the
// outcome and end time the store recorded.
func TestTelemetryRemoteSettledElsewhere(t *testing.T) {
	h, clk := newClockHarness(t)
	ctx := context.Background()
	other, err := NewClient(h.c.store, &Config{Clock: clk, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	h.enqueue(EnqueueParams{Queue: "q", Kind: "k"})
	tk := h.claimRemote(1)[0]
	clk.Advance(5 * time.Second)
	if _, err := remote.New(other.e).Complete(ctx, tk.ID, tk.LeaseToken, nil, nil); err != nil {
		t.Fatal(err)
	}
	settledAt := clk.Now()
	if err := Maintain(ctx, h.c); err != nil { // lease not over yet: span stays open
		t.Fatal(err)
	}
	if len(h.processSpans()) != 0 {
		t.Fatal("span ended before the sweep")
	}
	clk.Advance(2 * time.Minute) // past the sweep's period and grace
	if err := Maintain(ctx, h.c); err != nil {
		t.Fatal(err)
	}
	s := h.processSpans()[tk.ExecutionID]
	if s == nil {
		t.Fatal("the sweep did not end the span")
	}
	if spanAttr(s, "backstop.outcome") != "succeeded" || !s.EndTime().Equal(settledAt) || s.Status().Code == codes.Error {
		t.Errorf("swept span: outcome %q end %v (want %v) status %v", spanAttr(s, "backstop.outcome"), s.EndTime(), settledAt, s.Status())
	}
	expect(t, h.metrics(), map[string]map[string]int64{"backstop.attempts": {}})
	if n := h.c.e.RemoteAttempts(); n != 0 {
		t.Errorf("%d attempts still remembered", n)
	}
}

// A step skipped because its when could not be evaluated (on_when_error:
// treat_as_false) is counted by workflow and step.
func TestTelemetryWhenErrors(t *testing.T) {
	h, _ := newClockHarness(t)
	applyYAML(t, h.c, "name: w\nqueue: wf\nsteps:\n  - {id: maybe, kind: k, when: input.nope == 1, on_when_error: treat_as_false}\n  - {id: sure, kind: k, when: 'true'}\n")
	for range 2 {
		if _, err := h.c.RunWorkflow(context.Background(), RunWorkflowParams{Workflow: "w", Input: json.RawMessage(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	expect(t, h.metrics(), map[string]map[string]int64{
		"backstop.workflow.when.errors": {"step=maybe,workflow=w": 2},
	})
}
