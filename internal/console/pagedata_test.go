package console_test

import (
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/internal/testwait"
)

// The page carries the answers to its first reads — the session and the
// end of the event log, as GET /console/session and GET
// /v1/events?after=end&limit=1 answer them — for a signed-in browser only,
// and is never stored. Its
// assets are named by a version: those are kept a year and never
// revalidated; the unversioned names are revalidated by an ETag.
func TestPageCarriesFirstReads(t *testing.T) {
	forStores(t, func(t *testing.T, dbURL string) {
		e := newEnv(t, dbURL, envOpts{})
		e.deadLetter(t, map[string]any{"queue": "billing", "kind": "charge", "payload": map[string]any{"amount": 1}}, "card declined")
		get := func(path string, hdr map[string]string, cookies ...*http.Cookie) (*http.Response, string) {
			t.Helper()
			req, _ := http.NewRequest("GET", e.url+path, nil)
			for k, v := range hdr {
				req.Header.Set(k, v)
			}
			for _, c := range cookies {
				req.AddCookie(c)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp, string(b)
		}
		block := regexp.MustCompile(`<script type="application/json" id="backstop-boot">(.*?)</script>`)
		data := func(page string) map[string]map[string]any {
			t.Helper()
			m := block.FindStringSubmatch(page)
			if m == nil {
				t.Fatalf("no data block in the page:\n%s", page)
			}
			var d map[string]map[string]any
			if err := json.Unmarshal([]byte(m[1]), &d); err != nil {
				t.Fatalf("data block %q: %v", m[1], err)
			}
			return d
		}

		// Nobody signed in: nothing in the page.
		resp, page := get("/", nil)
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Cache-Control") != "no-store" {
			t.Fatalf("GET / without a session: %d, Cache-Control %q", resp.StatusCode, resp.Header.Get("Cache-Control"))
		}
		if d := data(page); len(d) != 0 {
			t.Fatalf("the page without a session carries %v", d)
		}

		// Signed in.
		code, _, sresp := e.call(t, "POST", "/console/session", api.RoleNone, map[string]string{"token": e.secret[api.RoleViewer]}, nil)
		if code != http.StatusOK {
			t.Fatalf("sign in: %d", code)
		}
		cookies := sresp.Cookies()
		// The viewer's token.created is the log's one event; on PostgreSQL
		// an event becomes readable once every older writing transaction
		// in the cluster has ended, so wait until the API sees it before
		// comparing the page's end of the log with the API's.
		testwait.For(t, "the log's end holds the token's event", func() bool {
			_, end, _ := e.call(t, "GET", "/v1/events?after=end&limit=1", api.RoleNone, nil, nil, cookies...)
			c, _ := end["next_cursor"].(string)
			return c != ""
		})
		resp, page = get("/", nil, cookies...)
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Cache-Control") != "no-store" {
			t.Fatalf("GET / with a session: %d, Cache-Control %q", resp.StatusCode, resp.Header.Get("Cache-Control"))
		}
		if strings.Count(page, "</script>") != strings.Count(page, "<script") {
			t.Fatalf("a script element ended early:\n%s", page)
		}
		d := data(page)
		_, session, _ := e.call(t, "GET", "/console/session", api.RoleNone, nil, nil, cookies...)
		_, end, _ := e.call(t, "GET", "/v1/events?after=end&limit=1", api.RoleNone, nil, nil, cookies...)
		s, c := d["/console/session"], d["/v1/events?after=end&limit=1"]
		if s == nil || s["name"] != "console-viewer" || s["role"] != "viewer" || s["csrf"] == "" || s["csrf"] != session["csrf"] {
			t.Fatalf("the page's session %v, GET /console/session %v", s, session)
		}
		if c == nil || c["next_cursor"] == nil || c["next_cursor"] != end["next_cursor"] {
			t.Fatalf("the page's end of the log %v, GET /v1/events?after=end %v", c, end)
		}

		// The assets the page names.
		m := regexp.MustCompile(`href="/console/assets/([0-9a-f]{12})/style\.css"`).FindStringSubmatch(page)
		if m == nil {
			t.Fatalf("the page names no versioned stylesheet:\n%s", page)
		}
		resp, versioned := get("/console/assets/"+m[1]+"/app.js", nil)
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Cache-Control") != "public, max-age=31536000, immutable" || resp.Header.Get("ETag") == "" {
			t.Fatalf("a versioned asset: %d, Cache-Control %q, ETag %q", resp.StatusCode, resp.Header.Get("Cache-Control"), resp.Header.Get("ETag"))
		}
		resp, plain := get("/console/assets/app.js", nil)
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Cache-Control") != "no-cache" || plain != versioned {
			t.Fatalf("the unversioned asset: %d, Cache-Control %q, same content %v", resp.StatusCode, resp.Header.Get("Cache-Control"), plain == versioned)
		}
		if resp, _ := get("/console/assets/app.js", map[string]string{"If-None-Match": resp.Header.Get("ETag")}); resp.StatusCode != http.StatusNotModified {
			t.Fatalf("revalidating the unversioned asset by its ETag: %d, want 304", resp.StatusCode)
		}
		if resp, _ := get("/console/assets/000000000000/app.js", nil); resp.StatusCode != http.StatusNotFound {
			t.Fatalf("another version's asset: %d, want 404", resp.StatusCode)
		}
	})
}
