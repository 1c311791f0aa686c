package api

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/backstophq/backstop"
	"github.com/backstophq/backstop/internal/dburl"
	"github.com/backstophq/backstop/internal/testdb"
)

// TestRecoverPanics: a panicking handler answers 500 "internal" without
// leaking the panic, and the server keeps serving.
func TestRecoverPanics(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := dburl.Open(ctx, testdb.SQLite(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	lib, _ := backstop.NewClient(s, nil)
	srv, err := New(Options{Client: lib, AnonymousAdmin: true})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	srv.handle("GET", "/v1/test/panic", RoleViewer, func(http.ResponseWriter, *http.Request) error { panic("secret internals") })
	srv.handle("GET", "/v1/test/error", RoleViewer, func(http.ResponseWriter, *http.Request) error {
		return context.DeadlineExceeded
	})
	ts := httptest.NewServer(srv)
	defer ts.Close()
	for _, path := range []string{"/v1/test/panic", "/v1/test/error"} {
		resp, err := http.Get(ts.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		var p Problem
		_ = json.NewDecoder(resp.Body).Decode(&p)
		resp.Body.Close()
		if resp.StatusCode != 500 || p.Code != "internal" || strings.Contains(p.Detail, "secret") || strings.Contains(p.Detail, "deadline") {
			t.Fatalf("%s: %d %+v", path, resp.StatusCode, p)
		}
	}
	resp, err := http.Get(ts.URL + "/healthz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("after a panic: %v %v", resp, err)
	}
	resp.Body.Close()
}
