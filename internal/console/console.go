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
	"embed"
	"encoding/json"
	"io"
	"io/fs"
	"net/http"
	"strings"

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
func Handler(a *api.Server) http.Handler {
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err)
	}
	files := http.StripPrefix("/console/assets/", http.FileServerFS(sub))
	c := &console{api: a}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		secure(w)
		http.ServeFileFS(w, r, sub, "index.html")
	})
	mux.Handle("GET /console/assets/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		secure(w)
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

func secure(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Security-Policy", contentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Cache-Control", "no-cache")
}

type console struct{ api *api.Server }

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
