package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
	"go.uber.org/goleak"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/internal/apiclient"
	"github.com/backstophq/backstop/internal/dburl"
	"github.com/backstophq/backstop/internal/testdb"
	"github.com/backstophq/backstop/internal/testwait"
	"github.com/backstophq/backstop/store"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testClock is the wall clock plus an offset tests move forward.
type testClock struct{ off atomic.Int64 }

func (c *testClock) Now() time.Time {
	return time.Now().UTC().Add(time.Duration(c.off.Load())).Truncate(time.Microsecond)
}
func (c *testClock) Advance(d time.Duration) { c.off.Add(int64(d)) }

// bundle is one real server on loopback over one real store.
type bundle struct {
	store  store.Store
	lib    *backstop.Client
	srv    *api.Server
	ts     *httptest.Server
	clock  *testClock
	secret map[api.Role]string
	// as calls the API with a role's token (RoleNone: no token).
	as map[api.Role]*apiclient.Client
	// spec validates every response the clients get.
	spec *specChecker
}

type setupOpts struct {
	anonymousAdmin bool
	maxBody        int64
	rateLimit      float64
	listMaxBytes   int
	// lib, when set, configures the library (its Clock is the test's).
	lib *backstop.Config
	// log, when set, receives the server's logs.
	log *slog.Logger
	// wrap, when set, wraps the migrated store the library and the server
	// use (testdb.RecordSettlements).
	wrap func(store.Store) store.Store
	// loopbackOnly, allowedHosts: api.Options.LoopbackOnly, AllowedHosts.
	loopbackOnly bool
	allowedHosts []string
}

// stores runs fn on SQLite and on Postgres.
func stores(t *testing.T, fn func(t *testing.T, dbURL func(t *testing.T) string)) {
	t.Run("sqlite", func(t *testing.T) { t.Parallel(); fn(t, func(t *testing.T) string { return testdb.SQLite(t) }) })
	t.Run("postgres", func(t *testing.T) { t.Parallel(); fn(t, func(t *testing.T) string { return testdb.Postgres(t) }) })
}

func setup(t testing.TB, url string, o setupOpts) *bundle {
	t.Helper()
	ctx := context.Background()
	s, err := dburl.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if o.wrap != nil {
		s = o.wrap(s)
	}
	clk := &testClock{}
	libCfg := &backstop.Config{}
	if o.lib != nil {
		libCfg = o.lib
	}
	libCfg.Clock = clk
	lib, err := backstop.NewClient(s, libCfg)
	if err != nil {
		t.Fatal(err)
	}
	srvLog := o.log
	if srvLog == nil {
		srvLog = slog.New(slog.DiscardHandler)
	}
	srv, err := api.New(api.Options{Client: lib, Logger: srvLog, AnonymousAdmin: o.anonymousAdmin, MaxBodyBytes: o.maxBody,
		RateLimit: o.rateLimit, PollInterval: 5 * time.Second, ListMaxBytes: o.listMaxBytes,
		LoopbackOnly: o.loopbackOnly, AllowedHosts: o.allowedHosts})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewUnstartedServer(srv)
	hs := srv.HTTPServer("")
	ts.Config.ReadHeaderTimeout, ts.Config.ReadTimeout, ts.Config.IdleTimeout = hs.ReadHeaderTimeout, hs.ReadTimeout, hs.IdleTimeout
	ts.Config.RegisterOnShutdown(srv.Close)
	ts.Start()
	t.Cleanup(func() { ts.Close(); srv.Close() })
	b := &bundle{store: s, lib: lib, srv: srv, ts: ts, clock: clk, secret: map[api.Role]string{},
		as: map[api.Role]*apiclient.Client{}, spec: newSpecChecker(t)}
	for _, r := range []api.Role{api.RoleViewer, api.RoleOperator, api.RoleAdmin} {
		sec, _, err := api.CreateToken(ctx, s.(store.Tokens), "test-"+r.String(), r, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		b.secret[r] = sec
	}
	for _, r := range []api.Role{api.RoleNone, api.RoleViewer, api.RoleOperator, api.RoleAdmin} {
		c := apiclient.New(ts.URL, b.secret[r])
		c.HTTP = &http.Client{Timeout: 60 * time.Second, Transport: b.spec.transport(ts.Client().Transport)}
		b.as[r] = c
	}
	return b
}

// setupTokens returns the token.created events of the three tokens setup
// created (one per role), in log order, once they are final: a test that
// reads the whole log reads behind the last one's cursor, or expects them
// first.
func (b *bundle) setupTokens(t *testing.T) []backstop.Event {
	t.Helper()
	var p backstop.EventPage
	testwait.For(t, "the setup's three token.created events", func() bool {
		var err error
		p, err = b.lib.ReadEvents(context.Background(), backstop.ReadEventsParams{Stream: "type." + store.EventTokenCreated})
		if err != nil {
			t.Fatal(err)
		}
		return len(p.Events) >= 3
	})
	if len(p.Events) != 3 {
		t.Fatalf("setup wrote %d token.created events, want 3: %+v", len(p.Events), p.Events)
	}
	return p.Events
}

// raw sends a request with an arbitrary body and returns status and body;
// the response is checked against the OpenAPI document too.
func (b *bundle) raw(t *testing.T, role api.Role, method, path, contentType, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, b.ts.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if sec := b.secret[role]; sec != "" {
		req.Header.Set("Authorization", "Bearer "+sec)
	}
	resp, err := b.as[api.RoleNone].HTTP.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

// specChecker validates responses against the served OpenAPI document with
// kin-openapi (which applies JSON Schema 2020-12 to a 3.1 document).
type specChecker struct {
	t      testing.TB
	doc    *openapi3.T
	router routers.Router
	mu     sync.Mutex
	seen   map[string]bool // "METHOD path-template status"
}

func loadSpec(t testing.TB) *openapi3.T {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(api.OpenAPI())
	if err != nil {
		t.Fatalf("openapi.json does not load: %v", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("openapi.json is not a valid OpenAPI document: %v", err)
	}
	return doc
}

// ndjsonDecoder reads an application/x-ndjson body as an array of its
// lines, which the document describes as {type: array, items: …}.
func ndjsonDecoder(body io.Reader, _ http.Header, _ *openapi3.SchemaRef, _ openapi3filter.EncodingFn) (any, error) {
	out := []any{}
	dec := json.NewDecoder(body)
	for {
		var v any
		if err := dec.Decode(&v); err == io.EOF {
			return out, nil
		} else if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
}

var registerNDJSON sync.Once

func newSpecChecker(t testing.TB) *specChecker {
	registerNDJSON.Do(func() { openapi3filter.RegisterBodyDecoder("application/x-ndjson", ndjsonDecoder) })
	doc := loadSpec(t)
	doc.Servers = openapi3.Servers{{URL: "/"}}
	r, err := legacy.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	return &specChecker{t: t, doc: doc, router: r, seen: map[string]bool{}}
}

type checkingTransport struct {
	c    *specChecker
	next http.RoundTripper
}

func (c *specChecker) transport(next http.RoundTripper) http.RoundTripper {
	return &checkingTransport{c: c, next: next}
}

func (ct *checkingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := ct.next.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	body, rerr := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if rerr != nil {
		return resp, nil
	}
	ct.c.check(req, resp, body)
	return resp, nil
}

func (c *specChecker) check(req *http.Request, resp *http.Response, body []byte) {
	if resp.StatusCode == http.StatusMethodNotAllowed {
		return
	}
	probe := req.Clone(context.Background())
	probe.URL.Host, probe.URL.Scheme, probe.Host = "", "", ""
	route, params, err := c.router.FindRoute(probe)
	if err != nil {
		if resp.StatusCode != http.StatusNotFound {
			c.t.Errorf("openapi: %s %s answered %d but is not documented: %v", req.Method, req.URL.Path, resp.StatusCode, err)
		}
		return
	}
	in := &openapi3filter.RequestValidationInput{Request: probe, PathParams: params, Route: route,
		Options: &openapi3filter.Options{IncludeResponseStatus: true, AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}}
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header,
		Options: &openapi3filter.Options{IncludeResponseStatus: true}}
	out.SetBodyBytes(body)
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		c.t.Errorf("openapi: %s %s → %d does not match the document: %v\nbody: %.500s", req.Method, req.URL.Path, resp.StatusCode, err, body)
	}
	c.mu.Lock()
	c.seen[req.Method+" "+route.Path] = true
	c.mu.Unlock()
}

func testdbSQLite(t *testing.T) string { return testdb.SQLite(t) }

// rawToken sends a GET with an arbitrary Authorization value.
func (b *bundle) rawToken(t *testing.T, auth, method, path string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, b.ts.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(auth, " ") {
		auth = "Bearer " + auth
	}
	req.Header.Set("Authorization", auth)
	resp, err := b.as[api.RoleNone].HTTP.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

func testdbSQLite2(t testing.TB) string { return testdb.SQLite(t) }

// claimWaits signals each time one of b's long-polling claims finds
// nothing and waits. The signal never blocks the claim: the tests share
// one database, so every other test's enqueue wakes this server's claims
// (NOTIFY is per database), and a claim that woke and waited more times
// than a buffer holds must go on claiming, not hang in the signal.
func claimWaits(b *bundle) <-chan struct{} {
	waiting := make(chan struct{}, 16)
	b.srv.OnClaimWaiting(func() {
		select {
		case waiting <- struct{}{}:
		default:
		}
	})
	return waiting
}
