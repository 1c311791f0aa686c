package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/backstophq/backstop/internal/api"
)

// The browser tests drive a real headless Chromium (Debian's chromium)
// with chromedp against a real server on loopback. One browser process
// serves the whole test binary; each test gets a browser context of its
// own (its own cookie jar), so the tests run in parallel.
//
// Without chromium they skip, unless BACKSTOP_TEST_REQUIRE_CHROMIUM=1
// (scripts/test sets it) makes them fail. Screenshots go to
// BACKSTOP_CONSOLE_SCREENSHOTS (default: $TMPDIR/backstop-console-screenshots).

var (
	browserOnce sync.Once
	browserCtx  context.Context
	browserErr  error
	browserStop = func() {}
)

func TestMain(m *testing.M) {
	code := m.Run()
	browserStop()
	os.Exit(code)
}

func chromiumPath() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// browser answers a fresh browser context (a tab in a new, isolated
// browser context) with a deadline, closed when the test ends.
func browser(t testing.TB) context.Context {
	t.Helper()
	return browserWithin(t, 90*time.Second)
}

// browserWithin is browser with a deadline of d.
func browserWithin(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	path := chromiumPath()
	if path == "" {
		if os.Getenv("BACKSTOP_TEST_REQUIRE_CHROMIUM") != "" {
			t.Fatal("chromium is not installed and BACKSTOP_TEST_REQUIRE_CHROMIUM is set (scripts/deps installs it)")
		}
		t.Skip("chromium is not installed (set BACKSTOP_TEST_REQUIRE_CHROMIUM=1 to fail instead)")
	}
	browserOnce.Do(func() {
		dir, err := os.MkdirTemp("", "backstop-chromium-")
		if err != nil {
			browserErr = err
			return
		}
		opts := []chromedp.ExecAllocatorOption{
			chromedp.ExecPath(path),
			chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
			chromedp.NoDefaultBrowserCheck,
			chromedp.Flag("disable-quic", true),
			chromedp.Flag("disable-background-networking", true),
			chromedp.Flag("disable-component-update", true),
			chromedp.Flag("disable-sync", true),
			chromedp.Flag("disable-dev-shm-usage", true),
			chromedp.UserDataDir(dir),
			chromedp.WindowSize(1280, 900),
		}
		actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
		bctx, cancelBrowser := chromedp.NewContext(actx)
		if err := chromedp.Do(bctx); err != nil { // starts the browser
			browserErr = err
		}
		browserCtx = bctx
		browserStop = func() { cancelBrowser(); cancelAlloc(); os.RemoveAll(dir) }
	})
	if browserErr != nil {
		t.Fatalf("starting chromium: %v", browserErr)
	}
	ctx, cancel := chromedp.NewContext(browserCtx, chromedp.WithNewBrowserContext())
	ctx, cancelT := context.WithTimeout(ctx, d)
	t.Cleanup(func() { cancelT(); cancel() })
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("opening a browser context: %v", err)
	}
	return ctx
}

type act = chromedp.Action[chromedp.Void]

// run runs actions, each step within 30 seconds; on failure it reports
// the page's address and text.
func run(t testing.TB, ctx context.Context, what string, actions ...act) {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(sctx, actions...); err != nil {
		page, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`location.href + "\n" + document.body.innerText`))
		t.Fatalf("%s: %v\npage: %s", what, err, page)
	}
}

func nav(u string) act          { return chromedp.Navigate(u) }
func visible(sel string) act    { return chromedp.WaitVisible(chromedp.CSS(sel)) }
func keys(sel, text string) act { return chromedp.SendKeys(chromedp.CSS(sel), text) }

// submit clicks the form's submit button, as a user does (the page's submit
// handler runs; chromedp.Submit would call form.submit(), which skips it).
func submit(form string) act { return click(form + ` button[type="submit"]`) }

// click clicks the element once it is shown. It finds and clicks it in
// one step in the page: a live page re-renders as events arrive, and a
// node found by one protocol call may be gone by the next ("Could not find
// node with given id" under load).
func click(sel string) act {
	q, _ := json.Marshal(sel)
	return poll(`(() => { const e = document.querySelector(` + string(q) + `);
		if (!e || !(e.offsetWidth || e.offsetHeight || e.getClientRects().length)) return false;
		if (typeof e.click === "function") e.click();
		else e.dispatchEvent(new MouseEvent("click", { bubbles: true, cancelable: true, view: window })); // SVG elements
		return true })()`)
}
func poll(expression string) act {
	return chromedp.Poll[chromedp.Void](expression, chromedp.WithPollingInterval(50*time.Millisecond))
}

// evalJS evaluates a JavaScript expression in the page (a promise is
// awaited) and answers its value.
func evalJS[T any](t *testing.T, ctx context.Context, what, expression string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expression, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

// shotDir is where the screenshots go.
func shotDir(t *testing.T) string {
	dir := os.Getenv("BACKSTOP_CONSOLE_SCREENSHOTS")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "backstop-console-screenshots")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// screenshot saves the page as NAME-STORE.png.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	buf, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	store := filepath.Base(t.Name())
	p := filepath.Join(shotDir(t), fmt.Sprintf("%s-%s.png", name, store))
	if err := os.WriteFile(p, buf, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", p)
}

// signIn opens the console and signs in with role's token.
func (e *env) signIn(t testing.TB, ctx context.Context, role api.Role) {
	t.Helper()
	run(t, ctx, "open the console", nav(e.url+"/"), visible("#token"))
	run(t, ctx, "type the token", keys("#token", e.secret[role]))
	run(t, ctx, "submit the token", submit("#signin"))
	run(t, ctx, "wait for the session of "+role.String(), poll(`document.querySelector("#who").dataset.role === "`+role.String()+`"`))
	// The lists' panels (filters, counts, bulk actions) start closed; the
	// browser remembers the ones an operator opened. The tests work as
	// one who opened them all (TestBrowserListDensity as one who did not).
	run(t, ctx, "open the lists' panels", poll(`(() => { for (const p of `+panelIDs+`) localStorage.setItem("backstop.panel." + p, "open"); return true })()`))
}

// panelIDs are the lists' collapsible panels (lib.js panel), as a JS array.
const panelIDs = `["task-filters-panel", "dlq-filters-panel", "dlq-groups-panel", "dlq-bulk-panel"]`

// text reads an element's textContent.
func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	run(t, ctx, "wait for "+sel, visible(sel))
	s, err := chromedp.Run(ctx, chromedp.TextContent(chromedp.CSS(sel)))
	if err != nil {
		t.Fatalf("read %s: %v", sel, err)
	}
	return s
}

// waitText waits until sel's text contains want.
func waitText(t *testing.T, ctx context.Context, sel, want string) {
	t.Helper()
	js := fmt.Sprintf(`(() => { const el = document.querySelector(%q); return !!el && el.textContent.includes(%q); })()`, sel, want)
	run(t, ctx, fmt.Sprintf("wait for %q in %s", want, sel), poll(js))
}

// listIDs reads the ids a list shows (each shortened id's data-id),
// space-separated.
func listIDs(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	run(t, ctx, "wait for "+sel, visible(sel))
	return evalJS[string](t, ctx, "ids of "+sel, fmt.Sprintf(`[...document.querySelectorAll(%q)].map((e) => e.dataset.id).join(" ")`, sel+" [data-id]"))
}

// waitID waits until the list sel shows the id.
func waitID(t *testing.T, ctx context.Context, sel, id string) {
	t.Helper()
	js := fmt.Sprintf(`[...document.querySelectorAll(%q)].some((e) => e.dataset.id === %q)`, sel+" [data-id]", id)
	run(t, ctx, fmt.Sprintf("wait for %s in %s", id, sel), poll(js))
}

func count(t *testing.T, ctx context.Context, sel string) int {
	t.Helper()
	return evalJS[int](t, ctx, "count "+sel, fmt.Sprintf(`document.querySelectorAll(%q).length`, sel))
}

// cookies answers the browser's cookies for the server.
func cookies(t *testing.T, ctx context.Context) []*network.Cookie {
	t.Helper()
	res, err := chromedp.Call(ctx, network.GetCookies, network.GetCookiesParams{})
	if err != nil {
		t.Fatalf("read cookies: %v", err)
	}
	return res.Cookies
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
