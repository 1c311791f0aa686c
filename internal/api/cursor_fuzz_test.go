package api_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"testing"

	"github.com/backstophq/backstop/internal/api"
	"github.com/backstophq/backstop/internal/testdb"
)

// FuzzListCursors: whatever `after` a client sends, every listing answers
// 200 or 400 invalid_cursor, never a 5xx, on SQLite and (under
// scripts/with-postgres) on Postgres, where a NUL byte in a cursor used to
// reach the database and answer 500.
func FuzzListCursors(f *testing.F) {
	type target struct {
		name string
		srv  http.Handler
	}
	targets := []target{{"sqlite", setup(f, testdb.SQLite(f), setupOpts{anonymousAdmin: true, rateLimit: -1}).srv}}
	if os.Getenv(testdb.EnvPostgresURL) != "" {
		targets = append(targets, target{"postgres", setup(f, testdb.Postgres(f), setupOpts{anonymousAdmin: true, rateLimit: -1}).srv})
	}
	for _, s := range []string{"", "t1", "garbage", "\x00", "a\x00b", "a b", "\xff", "01a20f33-7d42-7b3c-891f-7622a392f59e",
		"0-1-2", "17", "-1", string(make([]byte, 300))} {
		f.Add(s)
	}
	paths := []string{"/v1/tasks", "/v1/dlq", "/v1/dlq/export", "/v1/workers", "/v1/runs/r1/tasks", "/v1/events"}
	f.Fuzz(func(t *testing.T, after string) {
		for _, tg := range targets {
			for _, path := range paths {
				req := httptest.NewRequest("GET", path+"?"+url.Values{"after": {after}}.Encode(), nil)
				rec := httptest.NewRecorder()
				tg.srv.ServeHTTP(rec, req)
				what := tg.name + " GET " + req.URL.String()
				checkAnswer(t, rec, what)
				if rec.Code == http.StatusOK {
					continue
				}
				var p api.Problem
				if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil || rec.Code != http.StatusBadRequest || p.Code != "invalid_cursor" {
					t.Fatalf("%s: %d %s, want 200 or 400 invalid_cursor", what, rec.Code, rec.Body.Bytes())
				}
			}
		}
	})
}
