// Package console is Backstop's web console (docs/console.md): an
// operator's UI served by `backstop serve` and `backstop demo --serve` at
// /, from assets embedded in the binary. Nothing is loaded from outside
// the host (a Content-Security-Policy of 'self' enforces it), and no
// build step is needed: the assets are hand-written HTML, CSS and
// JavaScript modules.
//
// The console holds no rule of its own: its JavaScript calls the same /v1
// API as the CLI, authenticated by the session cookie this package sets at
// sign-in (the API's auth.go and session.go resolve it to the same tokens
// and roles, and check the CSRF header on every mutating request). This
// package serves the assets and the session endpoints only.
package console

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"io"
	"io/fs"
	"net/http"
	"strings"
	"sync"

	"github.com/backstophq/backstop/internal/api"
)

//go:embed assets
var assets embed.FS

// contentSecurityPolicy: everything from this host, no inline script, no
// framing.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// Handler serves the console at / (the page), /console/ (its assets and
// session endpoints), and hands every other path to the API.
//
// The assets are served twice: under /console/assets/NAME, revalidated on
// every use (an ETag of their content), and under
// /console/assets/VERSION/NAME, where VERSION is a digest of every asset:
// those never change, so the browser keeps them for a year and a load
// reads them from its cache, not the network. The page names the
// versioned ones; the modules import each other by relative paths, so
// they stay within their version.
func Handler(a *api.Server) http.Handler {
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err)
	}
	b := loadBundle(sub)
	files := http.StripPrefix("/console/assets/", http.FileServerFS(sub))
	versioned := http.StripPrefix("/console/assets/"+b.version+"/", http.FileServerFS(sub))
	c := &console{api: a, page: b}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", c.index)
	mux.Handle("GET /console/assets/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		secure(w)
		name, ok := strings.CutPrefix(r.URL.Path, "/console/assets/"+b.version+"/")
		if !ok {
			name = strings.TrimPrefix(r.URL.Path, "/console/assets/")
		}
		// http.ServeContent answers If-None-Match with 304 by this ETag.
		if tag, known := b.etags[name]; known {
			w.Header().Set("ETag", tag)
		}
		if ok {
			w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
			versioned.ServeHTTP(w, r)
			return
		}
		files.ServeHTTP(w, r)
	}))
	mux.HandleFunc("GET /console/session", c.getSession)
	mux.HandleFunc("POST /console/session", c.signIn)
	mux.HandleFunc("POST /console/session/signout", c.signOut)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/" || strings.HasPrefix(r.URL.Path, "/console/") {
			if _, pat := mux.Handler(r); pat != "" {
				// The API's guard (host, origin, content type) covers the
				// console's own routes too.
				if a.Admit(w, r) {
					mux.ServeHTTP(w, r)
				}
				return
			}
		}
		a.ServeHTTP(w, r)
	})
}

// bundle is what the console serves, read once from the embedded assets.
type bundle struct {
	version string            // a digest of every asset
	etags   map[string]string // asset name → its ETag
	// The page (index.html, naming the versioned assets), cut where the
	// first reads go (bootMarker).
	head, tail []byte
}

// bootMarker is the data block of index.html that index fills in.
const bootMarker = `<script type="application/json" id="backstop-boot">{}</script>`

func loadBundle(sub fs.FS) *bundle {
	b := &bundle{etags: map[string]string{}}
	all := sha256.New()
	err := fs.WalkDir(sub, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(sub, name)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(data)
		b.etags[name] = `"` + hex.EncodeToString(sum[:8]) + `"`
		all.Write([]byte(name))
		all.Write(sum[:])
		return nil
	})
	if err != nil {
		panic(err)
	}
	b.version = hex.EncodeToString(all.Sum(nil)[:6])
	page, err := fs.ReadFile(sub, "index.html")
	if err != nil {
		panic(err)
	}
	page = bytes.ReplaceAll(page, []byte(`"/console/assets/`), []byte(`"/console/assets/`+b.version+`/`))
	i := bytes.Index(page, []byte(bootMarker))
	if i < 0 {
		panic("console: index.html has no " + bootMarker)
	}
	b.head = page[:i+len(bootMarker)-len("{}</script>")]
	b.tail = page[i+len(bootMarker)-len("</script>"):]
	return b
}

func secure(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Security-Policy", contentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Cache-Control", "no-cache")
}

// bootReads are the reads every full load starts with, which index answers
// in the page itself (lib.booted takes them from there): who is
// signed in, and where the event log ends (the first page's live stream
// starts there, so it is read before anything the page reads).
var bootReads = []string{"/console/session", "/v1/events?after=end&limit=1"}

// index serves the page with the answers to bootReads in its data block,
// each as the API answers it to this request (its cookie, its role), so a
// load needs no round trip before the page's own reads. The page above
// the data block goes out first, so the browser fetches the stylesheet and
// the modules while the server reads. Nothing is read for a request
// without a session (the page asks for the session itself and shows the
// sign-in form). The page then holds the session's CSRF token: it is
// never stored (no-store), and only this origin can read it, as it can
// GET /console/session.
func (c *console) index(w http.ResponseWriter, r *http.Request) {
	secure(w)
	h := w.Header()
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Type", "text/html; charset=utf-8")
	if r.Method == http.MethodHead {
		return
	}
	_, _ = w.Write(c.page.head)
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
	answers := make([]json.RawMessage, len(bootReads))
	var wg sync.WaitGroup
	for i, path := range bootReads {
		wg.Go(func() { answers[i] = c.read(r, path) })
	}
	wg.Wait()
	data := map[string]json.RawMessage{}
	for i, path := range bootReads {
		if answers[0] != nil && answers[i] != nil { // the session first: none without it
			data[path] = answers[i]
		}
	}
	// json.Marshal escapes <, > and &: the data cannot end the script.
	js, err := json.Marshal(data)
	if err != nil {
		js = []byte("{}")
	}
	_, _ = w.Write(js)
	_, _ = w.Write(c.page.tail)
}

// read answers GET path as the console's routes or the API would answer
// it to r (the same cookie), or nil unless it is a 200 with JSON.
func (c *console) read(r *http.Request, path string) json.RawMessage {
	sub, err := http.NewRequestWithContext(r.Context(), http.MethodGet, path, nil)
	if err != nil {
		return nil
	}
	sub.Host = r.Host
	sub.RemoteAddr = r.RemoteAddr
	sub.Header = r.Header.Clone()
	sub.Header.Set("Accept", "application/json")
	rec := &recorder{header: http.Header{}}
	if path == "/console/session" {
		c.getSession(rec, sub)
	} else {
		c.api.ServeHTTP(rec, sub)
	}
	if rec.status != 0 && rec.status != http.StatusOK || !strings.Contains(rec.header.Get("Content-Type"), "json") {
		return nil
	}
	if !json.Valid(rec.body.Bytes()) {
		return nil
	}
	return bytes.TrimSpace(rec.body.Bytes())
}

// recorder is the http.ResponseWriter read keeps an answer in.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (w *recorder) Header() http.Header { return w.header }
func (w *recorder) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.body.Write(p)
}
func (w *recorder) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
}

type console struct {
	api  *api.Server
	page *bundle
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(v)
}

// GET /console/session: who is signed in, with the CSRF token the page
// sends on every mutating request (readable by this origin's scripts only:
// the API sends no CORS headers); 401 when nobody is.
func (c *console) getSession(w http.ResponseWriter, r *http.Request) {
	se, err := c.api.CurrentSession(r)
	if err != nil {
		c.api.WriteProblem(w, r, err)
		return
	}
	writeJSON(w, se)
}

// signInRequest is POST /console/session's body.
type signInRequest struct {
	Token string `json:"token"`
}

// POST /console/session {"token": "bst_..."}: opens a session and sets its
// cookie. The JSON content type is required: a cross-site form cannot send
// it without a CORS preflight, which this server never grants.
func (c *console) signIn(w http.ResponseWriter, r *http.Request) {
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		http.Error(w, "send the token as application/json", http.StatusUnsupportedMediaType)
		return
	}
	var req signInRequest
	body, err := io.ReadAll(io.LimitReader(r.Body, 4096))
	if err != nil || json.Unmarshal(body, &req) != nil || req.Token == "" {
		http.Error(w, `want {"token": "bst_..."}`, http.StatusBadRequest)
		return
	}
	se, err := c.api.SignIn(r.Context(), req.Token)
	if err != nil {
		c.api.WriteProblem(w, r, err)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: api.SessionCookie, Value: se.ID, Path: "/", Expires: se.Expires,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	writeJSON(w, se)
}

// POST /console/session/signout (with the CSRF header): ends the session
// and clears the cookie.
func (c *console) signOut(w http.ResponseWriter, r *http.Request) {
	if err := c.api.SignOut(r); err != nil {
		c.api.WriteProblem(w, r, err)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: api.SessionCookie, Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	w.WriteHeader(http.StatusNoContent)
}
