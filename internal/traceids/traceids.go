// Package traceids lets a span be started with ids chosen in advance: a
// workflow run's root span is recorded when the run finishes, by whichever
// process finishes it, with the ids its steps' spans (started earlier,
// elsewhere) already named as their parent. Generator is the
// OpenTelemetry SDK's IDGenerator that honours them; any span started
// without them gets random ids.
package traceids

import (
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"math/rand/v2"
	"sync"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// ForceAttribute, true on a span, forces its sampling (the binary's
// sampler): a task enqueued or a run started with trace forced.
const ForceAttribute = "backstop.trace"

type wantKey struct{}

type want struct {
	tid trace.TraceID
	sid trace.SpanID
}

// With is ctx asking the next span started from it without a parent for
// trace id tid and span id sid.
func With(ctx context.Context, tid trace.TraceID, sid trace.SpanID) context.Context {
	return context.WithValue(ctx, wantKey{}, want{tid, sid})
}

// Generator is an IDGenerator that gives a new root span the ids With
// asked for, and random ids otherwise (as the SDK's default does).
func Generator() sdktrace.IDGenerator {
	var seed [16]byte
	_, _ = crand.Read(seed[:])
	return &generator{r: rand.New(rand.NewPCG(binary.LittleEndian.Uint64(seed[:8]), binary.LittleEndian.Uint64(seed[8:])))}
}

type generator struct {
	mu sync.Mutex
	r  *rand.Rand
}

func (g *generator) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	if w, ok := ctx.Value(wantKey{}).(want); ok && w.tid.IsValid() && w.sid.IsValid() {
		return w.tid, w.sid
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	var tid trace.TraceID
	var sid trace.SpanID
	for !tid.IsValid() {
		binary.NativeEndian.PutUint64(tid[:8], g.r.Uint64())
		binary.NativeEndian.PutUint64(tid[8:], g.r.Uint64())
	}
	for !sid.IsValid() {
		binary.NativeEndian.PutUint64(sid[:], g.r.Uint64())
	}
	return tid, sid
}

func (g *generator) NewSpanID(_ context.Context, _ trace.TraceID) trace.SpanID {
	g.mu.Lock()
	defer g.mu.Unlock()
	var sid trace.SpanID
	for !sid.IsValid() {
		binary.NativeEndian.PutUint64(sid[:], g.r.Uint64())
	}
	return sid
}
