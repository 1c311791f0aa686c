package console_test

import (
	"io"
	"net/http"
	"regexp"
	"slices"
	"testing"
)

// TestModulePreloads: the console's page names every module app.js
// imports (at any depth) as a modulepreload, and nothing else, so that a
// load fetches them all at once instead of one level of imports after the
// other (docs/benchmarks.md, "Console page times in a browser").
func TestModulePreloads(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testdbSQLite(t), envOpts{})
	get := func(path string) string {
		t.Helper()
		resp, err := http.Get(e.url + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d", path, resp.StatusCode)
		}
		return string(b)
	}
	var preloaded []string
	for _, m := range regexp.MustCompile(`<link rel="modulepreload" href="/console/assets/[0-9a-f]{12}/([a-z]+\.js)">`).FindAllStringSubmatch(get("/"), -1) {
		preloaded = append(preloaded, m[1])
	}
	imports := regexp.MustCompile(`(?m)^import\s[^;]*?from\s+'\./([a-z]+\.js)'`)
	seen := map[string]bool{"app.js": true}
	queue := []string{"app.js"}
	var imported []string
	for len(queue) > 0 {
		f := queue[0]
		queue = queue[1:]
		for _, m := range imports.FindAllStringSubmatch(get("/console/assets/"+f), -1) {
			if !seen[m[1]] {
				seen[m[1]] = true
				imported = append(imported, m[1])
				queue = append(queue, m[1])
			}
		}
	}
	slices.Sort(preloaded)
	slices.Sort(imported)
	if len(imported) < 10 || !slices.Equal(preloaded, imported) {
		t.Fatalf("modulepreload %v, app.js imports %v", preloaded, imported)
	}
}
