package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestProgressOnARealRun runs `go test -json` on a small module with a
// passing, a failing, a not-building and a test-less package, and checks
// that each package's start and end are reported and a failure's output is
// shown in full.
func TestProgressOnARealRun(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	files := map[string]string{
		"go.mod":             "module example.com/m\n\ngo 1.26\n",
		"pass/pass_test.go":  "package pass\nimport \"testing\"\nfunc TestOK(t *testing.T) { t.Log(\"quiet-when-passing\") }\n",
		"fail/fail_test.go":  "package fail\nimport \"testing\"\nfunc TestBad(t *testing.T) {\n\tt.Log(\"first-line-of-output\")\n\tt.Fatal(\"boom-marker\")\n}\n",
		"broken/b_test.go":   "package broken\nimport \"testing\"\nfunc TestX(t *testing.T) { undefinedThing() }\n",
		"notests/notests.go": "package notests\n",
	}
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("go", "test", "-json", "-count=1", "./...")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	stream, _ := cmd.Output() // exits 1: a package fails
	if len(stream) == 0 {
		t.Fatal("go test -json printed nothing")
	}
	var out bytes.Buffer
	if run(bytes.NewReader(stream), &out, time.Hour) {
		t.Error("run reported success for a failing run")
	}
	got := out.String()
	for _, want := range []string{
		"start example.com/m/pass\n", "ok    example.com/m/pass ",
		"start example.com/m/fail\n", "FAIL  example.com/m/fail ", "first-line-of-output", "boom-marker", "--- FAIL: TestBad",
		"FAIL  example.com/m/broken", "undefinedThing",
		"1 packages passed, 2 failed",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "quiet-when-passing") {
		t.Errorf("a passing package's output was printed:\n%s", got)
	}
}

// TestStillRunning: a package running longer than the period is named.
func TestStillRunning(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var out bytes.Buffer
	p := newProgress(&out, func() time.Time { return now })
	p.line([]byte(`{"Action":"start","Package":"a/slow"}`))
	now = now.Add(3 * time.Minute)
	if r := p.running(); r != "a/slow (3m0s)" {
		t.Fatalf("running: %q", r)
	}
	p.line([]byte(`{"Action":"pass","Package":"a/slow","Elapsed":180}`))
	if r := p.running(); r != "" {
		t.Fatalf("running after pass: %q", r)
	}
	p.line([]byte("not json: passes through"))
	if !strings.Contains(out.String(), "not json: passes through\n") {
		t.Fatalf("non-JSON line lost: %q", out.String())
	}
}
