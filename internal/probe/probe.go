// Package probe marks where a worker's claim and its hand-off to the
// handler spend their time, for the latency bench's stage probe
// (`BACKSTOP_BENCH_STAGES`, internal/bench/stages.go). It is off unless a
// Sink rides the context the worker was started with (WithSink): the
// worker, the engine and the store look it up in the context they already
// have, so nothing is installed through a global, and without a sink each
// place costs one context lookup per claim and none per task.
package probe

import (
	"context"
	"sync"
	"time"

	bt "github.com/backstophq/backstop/backstoptype"
)

// Sink receives a worker's marks. Its methods are called from the fetch
// loop and from the attempts' goroutines, concurrently.
type Sink interface {
	// Claimed: a claim's tasks (c.IDs) reached the fetch loop
	// (c.Returned), with the claim statements that took them (c.Picks;
	// none where the store marks none: SQLite, the limited and the fair
	// claims).
	Claimed(c *Claim)
	// Task: a task of a claim passed stage at at.
	Task(id string, stage TaskStage, at time.Time)
}

// TaskStage is a point of a claimed task's way to its handler.
type TaskStage int

const (
	// Handed: the fetch loop starts the task's attempt (Worker.start),
	// after the tasks claimed before it in the same claim.
	Handed TaskStage = iota
	// Running: the attempt's goroutine runs (the Go scheduler let it),
	// before the wait for a slot (prefetch) and the handler's telemetry.
	Running
)

// Claim is one claim of a fetch loop: when it began (before the ordering
// admission and the claim settings), each statement that claimed tasks,
// and when its tasks reached the fetch loop. A claim split into parts
// (ClaimParallelism) gathers the statements of every part.
type Claim struct {
	Began, Returned time.Time
	IDs             []string // the tasks the claim returned (Return)

	mu    sync.Mutex
	picks []Pick
}

// Pick is one claim statement: when it asked the pool for a connection,
// when it had one, and when its rows were read (the server's execution,
// its COMMIT and the round trip: the store runs each claim statement as
// its own transaction), with the tasks it claimed.
type Pick struct {
	Kind                    string // "cursor" or "head" (store/pgstore/cursor.go)
	Acquire, Acquired, Done time.Time
	IDs                     []string
}

// AddPick records a statement of c (nil: no probe).
func (c *Claim) AddPick(p Pick) {
	if c == nil {
		return
	}
	c.mu.Lock()
	c.picks = append(c.picks, p)
	c.mu.Unlock()
}

// Return marks c's tasks reaching the fetch loop, and returns c.
func (c *Claim) Return(tasks []*bt.Task) *Claim {
	c.Returned = time.Now()
	c.IDs = make([]string, len(tasks))
	for i, t := range tasks {
		c.IDs[i] = t.ID
	}
	return c
}

// Picks are c's statements so far.
func (c *Claim) Picks() []Pick {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Pick(nil), c.picks...)
}

type sinkKey struct{}
type claimKey struct{}

// WithSink is ctx carrying s: a worker started with it marks its claims
// and tasks to s.
func WithSink(ctx context.Context, s Sink) context.Context {
	return context.WithValue(ctx, sinkKey{}, s)
}

// SinkFrom is the sink ctx carries, nil for none.
func SinkFrom(ctx context.Context) Sink {
	s, _ := ctx.Value(sinkKey{}).(Sink)
	return s
}

// StartClaim begins a claim's record when sink is not nil: ctx carries it
// to the store's statements (ClaimFrom).
func StartClaim(ctx context.Context, sink Sink) (context.Context, *Claim) {
	if sink == nil {
		return ctx, nil
	}
	c := &Claim{Began: time.Now()}
	return context.WithValue(ctx, claimKey{}, c), c
}

// ClaimFrom is the claim record ctx carries, nil for none.
func ClaimFrom(ctx context.Context) *Claim {
	c, _ := ctx.Value(claimKey{}).(*Claim)
	return c
}
