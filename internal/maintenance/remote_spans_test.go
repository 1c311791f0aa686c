package maintenance_test

import (
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	bt "github.com/backstophq/backstop/backstoptype"
	"github.com/backstophq/backstop/internal/engine"
	"github.com/backstophq/backstop/internal/maintenance"
	"github.com/backstophq/backstop/internal/testdb"
)

// TestRemoteSpans: the span of a remote attempt this process handed out
// and that another process settled (its lease expiry) stays open while
// its lease is within the grace, then a sweep ends it with the outcome and
// the end time the store recorded; an attempt whose lease is current keeps
// its span open.
func TestRemoteSpans(t *testing.T) {
	testdb.EachStore(t, func(t *testing.T, db string) {
		sr := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
		b := setup(t, db, &engine.Config{TracerProvider: tp, MaxAttempts: 3})
		b.enqueue(engine.EnqueueParams{ID: "gone", Queue: "q1", Kind: "k"}, engine.EnqueueParams{ID: "held", Queue: "q2", Kind: "k"})
		b.e.RememberClaims(b.ctx, b.claim("q1", 1, 10*time.Second), 10*time.Second)
		b.e.RememberClaims(b.ctx, b.claim("q2", 1, time.Hour), time.Hour)
		eq(t, "remembered", b.e.RemoteAttempts(), 2)

		b.clock.Advance(11 * time.Second)
		// Another process's maintenance settles it: this engine's memory
		// of the attempt stays.
		other, err := engine.New(b.s, &engine.Config{Clock: b.clock, Logger: b.e.Config().Logger, MaxAttempts: 3})
		if err != nil {
			t.Fatal(err)
		}
		b.run(maintenance.NewLeaseExpiry(other, time.Second))
		finished := b.clock.Now()
		eq(t, "gone", b.get("gone").State, bt.StateScheduled)

		svc := maintenance.NewRemoteSpans(b.e, time.Second)
		b.run(svc) // the lease ran out 1s ago: within the grace
		eq(t, "ended within the grace", len(sr.Ended()), 0)

		b.clock.Advance(time.Minute)
		b.run(svc)
		ended := sr.Ended()
		if len(ended) != 1 {
			t.Fatalf("ended %d spans, want 1", len(ended))
		}
		s := ended[0]
		outcome := ""
		for _, a := range s.Attributes() {
			if a.Key == "backstop.outcome" {
				outcome = a.Value.AsString()
			}
		}
		if s.Name() != "process q1" || outcome != string(bt.OutcomeLeaseExpired) || !s.EndTime().Equal(finished) {
			t.Fatalf("ended %q outcome %q at %s, want process q1 lease_expired at %s", s.Name(), outcome, s.EndTime(), finished)
		}
		eq(t, "remembered after the sweep", b.e.RemoteAttempts(), 1)
	})
}
