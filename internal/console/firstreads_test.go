package console_test

import (
	"testing"

	"github.com/backstophq/backstop/internal/api"
)

// A full load of a signed-in console asks the server for nothing before
// the page's own reads: the session and the end of the event log come in
// the page (console.go: index), and the stylesheet and the modules, the
// second time, from the browser's cache. The page then shows and follows
// its live stream from that cursor, a page opened by a click reads the end
// afresh, and a load without a session reads the session and shows the
// sign-in form.
func TestBrowserFirstReads(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testdbSQLite(t), envOpts{})
	e.deadLetter(t, map[string]any{"queue": "billing", "kind": "charge", "payload": map[string]any{"amount": 1}}, "card declined")
	ctx := browser(t)
	e.signIn(t, ctx, api.RoleViewer)
	// Twice: the first load may find the assets' current version uncached.
	for range 2 {
		run(t, ctx, "a full load of the dead letters", nav("about:blank"), nav(e.url+"/#/dlq"), visible("#dlq-list"))
	}
	reads := evalJS[[]any](t, ctx, "the load's requests", `(() => {
	  const rs = performance.getEntriesByType('resource');
	  const path = (r) => new URL(r.name).pathname + new URL(r.name).search;
	  const boot = rs.filter((r) => path(r) === '/console/session' || path(r).startsWith('/v1/events?after=end'));
	  const assets = rs.filter((r) => new URL(r.name).pathname.startsWith('/console/assets/'));
	  const fetched = assets.filter((r) => r.transferSize > 0).map(path);
	  const first = rs.find((r) => path(r).startsWith('/v1/dlq'));
	  const late = assets.filter((r) => first && r.startTime > first.startTime).map(path);
	  return [boot.length, assets.length, fetched, late];
	})()`)
	if reads[0] != float64(0) {
		t.Fatalf("a full load read the session or the end of the log %v times, want 0 (both are in the page)", reads[0])
	}
	if n, _ := reads[1].(float64); n < 10 {
		t.Fatalf("the load used %v assets, want the stylesheet and every module", reads[1])
	}
	if f, _ := reads[2].([]any); len(f) != 0 {
		t.Fatalf("assets read over the network on the second load (want all from the cache): %v", f)
	}
	if l, _ := reads[3].([]any); len(l) != 0 {
		t.Fatalf("assets asked for after the page's first read: %v", l)
	}
	// The live stream follows from the page's cursor: a new dead letter
	// shows without a reload.
	e.deadLetter(t, map[string]any{"queue": "billing", "kind": "charge", "payload": map[string]any{"amount": 2}}, "card expired")
	waitText(t, ctx, "#dlq-list", "card expired")
	// A page opened by a click reads the end of the log afresh.
	run(t, ctx, "open the tasks", click(`#nav a[data-page="tasks"]`), visible("#main > .view"))
	n := evalJS[float64](t, ctx, "end-of-log reads", `performance.getEntriesByType('resource').filter((r) => r.name.includes('/v1/events?after=end')).length`)
	if n != 1 {
		t.Fatalf("end-of-log reads after a second page: %v, want 1", n)
	}
	// Without a session (a browser that never signed in) the page holds
	// nothing; it reads the session, once, and asks for a token.
	other := browser(t)
	run(t, other, "a load without a session", nav(e.url+"/#/dlq"), visible("#token"))
	s := evalJS[float64](t, other, "session reads", `performance.getEntriesByType('resource').filter((r) => new URL(r.name).pathname === '/console/session').length`)
	if s != 1 {
		t.Fatalf("session reads without a session: %v, want 1", s)
	}
}
