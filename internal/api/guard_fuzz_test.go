package api

import (
	"net"
	"net/http"
	"strings"
	"testing"
)

// FuzzGuard feeds the guard arbitrary Host, Origin and Content-Type
// values: it never panics, a Host it takes on a loopback-only server names
// loopback or the allowed host, a write it takes with an Origin came from
// that same host (or the allowed one), and a write it takes with a type
// sent JSON (or YAML where the route takes it).
func FuzzGuard(f *testing.F) {
	for _, seed := range [][4]string{
		{"127.0.0.1:8080", "http://127.0.0.1:8080", "application/json", "POST"},
		{"localhost", "", "", "POST"},
		{"[::1]:9", "http://[::1]:9", "application/json; charset=utf-8", "POST"},
		{"evil.example:8080", "http://evil.example:8080", "application/json", "POST"},
		{"127.0.0.1:8080", "null", "text/plain", "POST"},
		{"backstop.internal", "https://backstop.internal", "application/yaml", "POST"},
		{"LOCALHOST.", "http://localhost.:80", "application/problem+json", "DELETE"},
		{"127.0.0.1.nip.io", "http://127.0.0.1", "multipart/form-data; boundary=x", "GET"},
		{"", "http://user@127.0.0.1", ";;", "PUT"},
	} {
		f.Add(seed[0], seed[1], seed[2], seed[3])
	}
	s := &Server{opts: Options{LoopbackOnly: true, AllowedHosts: []string{"backstop.internal"}}}
	f.Fuzz(func(t *testing.T, host, origin, ct, method string) {
		if method == "" || strings.ContainsAny(method, " \t\r\n") {
			method = "POST"
		}
		r, err := http.NewRequest(method, "http://127.0.0.1/", strings.NewReader("{}"))
		if err != nil {
			return
		}
		r.Host = host
		r.Header.Set("Origin", origin)
		r.Header.Set("Content-Type", ct)
		pattern := ""
		if strings.Contains(ct, "yaml") {
			pattern = "POST /v1/workflows"
		}
		if s.admit(r, pattern) != nil {
			return
		}
		h := hostName(host)
		if ip := net.ParseIP(h); h != "localhost" && h != "backstop.internal" && (ip == nil || !ip.IsLoopback()) {
			t.Fatalf("Host %q (%q) was taken", host, h)
		}
		if safeMethod(method) {
			return
		}
		if origin != "" && !strings.Contains(strings.ToLower(origin), h) && !strings.Contains(strings.ToLower(origin), "backstop.internal") {
			t.Fatalf("a write from %q to Host %q was taken", origin, host)
		}
		lc := strings.ToLower(ct)
		if !strings.Contains(lc, "json") && !strings.Contains(lc, "yaml") {
			t.Fatalf("a write of type %q was taken", ct)
		}
	})
}
