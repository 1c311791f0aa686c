package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/backstophq/backstop/internal/testdb"
)

// scrapeURL fetches a /metrics page.
func scrapeURL(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
	}
	return string(b)
}

// checkPromtool runs promtool check metrics on a scrape when promtool is
// there (required with BACKSTOP_REQUIRE_PROMTOOL=1).
func checkPromtool(t *testing.T, text string) {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("BACKSTOP_REQUIRE_PROMTOOL") == "1" {
			t.Fatal("promtool not found and BACKSTOP_REQUIRE_PROMTOOL=1")
		}
		t.Log("promtool not found: exposition not checked")
		return
	}
	cmd := exec.Command(p, "check", "metrics")
	cmd.Stdin = strings.NewReader(text)
	if out, err := cmd.CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "" {
		t.Fatalf("promtool check metrics: %v\n%s\n%s", err, out, text)
	}
}

// TestMetricsEndpoints: `serve` serves /metrics with the store gauges, and
// `work --metrics-addr` serves the worker's attempt metrics, both in the
// Prometheus format promtool accepts; the worker logs JSON lines that carry
// the task's correlation fields.
func TestMetricsEndpoints(t *testing.T) {
	t.Parallel()
	db := testdb.SQLite(t)
	if _, stderr, code := runCLI(t, db, "enqueue", "--queue", "m", "--kind", "ok", "--attr", "run_id=r7", "--payload", "{}"); code != 0 {
		t.Fatalf("enqueue: exit %d: %s", code, stderr)
	}
	if _, stderr, code := runCLI(t, db, "enqueue", "--queue", "m", "--kind", "bad", "--max-attempts", "1", "--payload", "{}"); code != 0 {
		t.Fatalf("enqueue: exit %d: %s", code, stderr)
	}

	base := startServer(t, db)
	text := scrapeURL(t, base+"/metrics")
	if !strings.Contains(text, `backstop_tasks{queue="m",state="pending"} 2`) {
		t.Fatalf("serve /metrics lacks the store gauge for queue m:\n%s", text)
	}
	checkPromtool(t, text)

	dir := t.TempDir()
	logPath := filepath.Join(dir, "work.stderr")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	w := exec.Command(binary, "--db", db, "work", "--queue", "m", "--permanent-exit-codes", "65", "--metrics-addr", "127.0.0.1:0",
		"--", "sh", "-c", `cat >/dev/null; [ "$BACKSTOP_KIND" = ok ] || exit 65`)
	w.Stdout, w.Stderr = logf, logf
	w.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = w.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = w.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = w.Process.Kill()
			<-exited
		}
	})

	// Wait for the metrics URL and for both tasks to settle (the test's
	// deadline bounds the wait).
	readLog := func() (records []map[string]any) {
		t.Helper()
		f, err := os.Open(logPath)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var rec map[string]any
			if json.Unmarshal(sc.Bytes(), &rec) != nil {
				t.Fatalf("a log line is not JSON: %q", sc.Text())
			}
			records = append(records, rec)
		}
		return records
	}
	has := func(records []map[string]any, msg string) map[string]any {
		for _, rec := range records {
			if rec["msg"] == msg {
				return rec
			}
		}
		return nil
	}
	var records []map[string]any
	for {
		records = readLog()
		if rec := has(records, "serving metrics"); rec != nil {
			metricsURL, _ := rec["url"].(string)
			text = scrapeURL(t, metricsURL)
			// The counters move before the dead letter's log line is
			// written: wait for both.
			if strings.Contains(text, `backstop_attempts_total{kind="ok",outcome="succeeded",queue="m"} 1`) &&
				strings.Contains(text, `backstop_dead_letters_total{kind="bad",queue="m",reason="permanent_error",too_complex="false"} 1`) &&
				has(records, "task dead-lettered") != nil {
				break
			}
		}
		select {
		case <-exited:
			t.Fatalf("worker exited; log:\n%v", records)
		case <-time.After(20 * time.Millisecond):
		}
	}
	checkPromtool(t, text)

	// The dead-letter log line carries the task's correlation fields.
	found := false
	for _, rec := range records {
		if rec["msg"] == "task dead-lettered" {
			found = true
			for _, k := range []string{"task_id", "queue", "kind", "attempt", "execution_id"} {
				if rec[k] == nil || rec[k] == "" {
					t.Errorf("dead-letter log record lacks %s: %v", k, rec)
				}
			}
		}
	}
	if !found {
		t.Errorf("no dead-letter log record; log: %v", records)
	}
}
