package console_test

import (
	"testing"

	"github.com/backstophq/backstop/internal/api"
)

// A full load reads the session and the end of the event log at once, as
// the page's scripts arrive (boot.js), not one after the other once they
// have run: each is requested once, and the end of the log is asked for
// before the session's answer is back. The page then shows and follows
// its live stream from that cursor, and a page opened by a click reads the
// end afresh.
func TestBrowserFirstReads(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testdbSQLite(t), envOpts{})
	e.deadLetter(t, map[string]any{"queue": "billing", "kind": "charge", "payload": map[string]any{"amount": 1}}, "card declined")
	ctx := browser(t)
	e.signIn(t, ctx, api.RoleViewer)
	run(t, ctx, "a full load of the dead letters", nav("about:blank"), nav(e.url+"/#/dlq"), visible("#dlq-list"))
	reads := evalJS[[]any](t, ctx, "the load's reads", `(() => {
	  const rs = performance.getEntriesByType('resource');
	  const of = (p) => rs.filter((r) => new URL(r.name).pathname + new URL(r.name).search === p);
	  const s = of('/console/session'), c = of('/v1/events?after=end&limit=1');
	  return [s.length, c.length, c.length && s.length ? c[0].startTime < s[0].responseEnd : false];
	})()`)
	if reads[0] != float64(1) || reads[1] != float64(1) || reads[2] != true {
		t.Fatalf("session reads, end-of-log reads, the end asked for before the session answered: %v", reads)
	}
	// The live stream follows from the booted cursor: a new dead letter
	// shows without a reload.
	e.deadLetter(t, map[string]any{"queue": "billing", "kind": "charge", "payload": map[string]any{"amount": 2}}, "card expired")
	waitText(t, ctx, "#dlq-list", "card expired")
	// A page opened by a click reads the end of the log afresh.
	run(t, ctx, "open the tasks", click(`#nav a[data-page="tasks"]`), visible("#main > .view"))
	n := evalJS[float64](t, ctx, "end-of-log reads", `performance.getEntriesByType('resource').filter((r) => r.name.includes('/v1/events?after=end')).length`)
	if n != 2 {
		t.Fatalf("end-of-log reads after a second page: %v, want 2", n)
	}
}
