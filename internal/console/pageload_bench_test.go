package console_test

import (
	"context"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5"

	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/internal/testdb"
)

// contentObserver runs in every document the browser loads: it notes when
// the router first shows a page's view (app.js: #main gets the .view once
// the page has read its data and rendered it), in milliseconds since the
// navigation started (performance.now()).
const contentObserver = `(() => {
  const seen = () => {
    const v = document.querySelector('#main > .view');
    if (v && window.__contentAt === undefined) {
      window.__contentAt = performance.now();
      window.__contentError = !!v.querySelector('h1') && v.querySelector('h1').textContent === 'Something went wrong';
      obs.disconnect();
    }
  };
  const obs = new MutationObserver(seen);
  obs.observe(document, { childList: true, subtree: true });
})()`

// BenchmarkConsolePageLoads loads each console page in a real headless
// Chromium, a full navigation each time (from about:blank: the HTML, the
// scripts, the session, the page's API calls and its rendering), on
// PostgreSQL with 100,000 pending tasks and 100,000 dead letters
// (BACKSTOP_BENCH_TASKS=N changes both; 10000 for a quick run), and reports
// per page the median time from the navigation's start to the page's
// content in the document (ms/page), the slowest load (max-ms) and the
// page's first load, a warm-up not in the median (first-ms). It
// skips without chromium or without a Postgres server
// (BACKSTOP_TEST_POSTGRES_URL); docs/benchmarks.md has the command and the
// figures:
//
//	scripts/with-postgres go test -run '^$' -bench ConsolePageLoads -benchtime 7x -timeout 30m ./internal/console/
func BenchmarkConsolePageLoads(b *testing.B) {
	n := 100_000
	if v := os.Getenv("BACKSTOP_BENCH_TASKS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1000 {
			b.Fatalf("BACKSTOP_BENCH_TASKS=%q: want a number of at least 1000", v)
		}
	}
	if chromiumPath() == "" {
		b.Skip("chromium is not installed")
	}
	dbURL := testdb.Postgres(b)
	e := newEnv(b, dbURL, envOpts{})
	seed := seedConsole(b, e, n)
	vacuum(b, dbURL)
	ctx := browserWithin(b, 30*time.Minute)
	e.signIn(b, ctx, api.RoleViewer)
	if _, err := chromedp.Call(ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: contentObserver}); err != nil {
		b.Fatal(err)
	}
	where := func(w string) string { return url.QueryEscape(w) }
	for _, p := range []struct{ name, hash string }{
		{"overview", "/"},
		{"dlq", "/dlq"},
		{"dlq-filtered", "/dlq?queue=" + seed.queues[3] + "&error_contains=" + url.QueryEscape(seed.errorWord)},
		{"dlq-where", "/dlq?where=" + where(`payload.order == 4242`)},
		{"dlq-item", "/dlq/" + url.PathEscape(seed.deadID)},
		{"tasks", "/tasks"},
		{"tasks-newest", "/tasks?order=newest"},
		{"tasks-filtered", "/tasks?queue=" + seed.queues[5] + "&state=pending"},
		{"tasks-where", "/tasks?where=" + where(`payload.order == 4242`)},
		{"task", "/tasks/" + url.PathEscape(seed.deadID)},
		{"runs", "/runs"},
		{"run", "/runs/run-7"},
		{"workers", "/workers"},
		{"worker", "/workers/" + url.PathEscape(seed.workerID)},
		{"events", "/events"},
		{"ordering", "/ordering"},
		{"redrives", "/redrives"},
		{"audit", "/audit"},
	} {
		b.Run(p.name, func(b *testing.B) {
			// Every page's first load in the sitting is a warm-up, reported
			// apart (first-ms), not in the median: without it the first
			// page measured alone paid the fresh browser's cold start (its
			// scripts compiled without a code cache).
			first := loadPage(b, ctx, e.url+"/#"+p.hash)
			var times []float64
			for b.Loop() {
				times = append(times, loadPage(b, ctx, e.url+"/#"+p.hash))
			}
			// The last load's requests, as the browser timed them: where a
			// page's time goes.
			// The page itself first (its first byte, its last, and when the
			// parser finished), then each request (from the browser's cache
			// where it says so).
			waterfall, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(() => {
				const d = performance.getEntriesByType('navigation')[0];
				return [Math.round(d.responseStart) + '–' + Math.round(d.responseEnd) + ' the page (parsed at ' + Math.round(d.domInteractive) + ')']
				  .concat(performance.getEntriesByType('resource')
				    .filter((r) => r.startTime < window.__contentAt)
				    .map((r) => Math.round(r.startTime) + '–' + Math.round(r.responseEnd) + ' ' + new URL(r.name).pathname + new URL(r.name).search +
				      (r.transferSize === 0 && r.decodedBodySize > 0 ? ' (cache)' : '')))
				  .join('\n');
			})()`))
			if err == nil {
				b.Logf("%s: content at %.0f ms; requests (ms from the navigation's start):\n%s", p.name, times[len(times)-1], waterfall)
			}
			slices.Sort(times)
			b.ReportMetric(times[len(times)/2], "ms/page")
			b.ReportMetric(times[len(times)-1], "max-ms")
			b.ReportMetric(first, "first-ms")
		})
	}
}

// vacuum runs VACUUM (ANALYZE) on the seeded tables, which autovacuum does
// within a minute or so of a bulk write like the seed's: the pages are then
// read as a database in use serves them, with the planner's statistics and
// the visibility map that index-only scans read, instead of in the first
// moments after 200,000 inserts (docs/benchmarks.md, third round).
func vacuum(b *testing.B, dbURL string) {
	b.Helper()
	c, err := pgx.Connect(context.Background(), dbURL)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close(context.Background())
	start := time.Now()
	for _, table := range []string{"backstop_tasks", "backstop_executions", "backstop_events"} {
		if _, err := c.Exec(context.Background(), "VACUUM (ANALYZE) "+table); err != nil {
			b.Fatal(err)
		}
	}
	b.Logf("vacuumed in %v", time.Since(start).Round(time.Millisecond))
}

// loadPage navigates to u from about:blank (a full load) and answers the
// milliseconds from the navigation's start to the page's content.
func loadPage(b *testing.B, ctx context.Context, u string) float64 {
	b.Helper()
	run(b, ctx, "blank", nav("about:blank"))
	run(b, ctx, "open "+u, nav(u))
	// A poll that starts while the navigation replaces the document can
	// lose its execution context ("Cannot find context with specified
	// id"): poll again in the new one.
	for try := 0; ; try++ {
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := chromedp.Do(sctx, poll(`window.__contentAt !== undefined`))
		cancel()
		if err == nil {
			break
		}
		if try == 3 || !strings.Contains(err.Error(), "Cannot find context") {
			b.Fatalf("open %s: %v", u, err)
		}
	}
	res, err := chromedp.Run(ctx, chromedp.Evaluate[[]any](`[window.__contentAt, window.__contentError]`))
	if err != nil {
		b.Fatalf("%s: %v", u, err)
	}
	if res[1] == true {
		page, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
		b.Fatalf("%s: the page failed: %s", u, page)
	}
	return res[0].(float64)
}
