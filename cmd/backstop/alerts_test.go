package main

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/backstophq/backstop/internal/testdb"
	"github.com/backstophq/backstop/store"
)

var (
	alertSelectorRe = regexp.MustCompile(`\b((?:backstop|messaging)_[a-z_]+)\b`)
	alertLabelRe    = regexp.MustCompile(`\{\{ \$labels\.([a-zA-Z_]+) \}\}`)
	alertCommandRe  = regexp.MustCompile("`(backstop [^`]+)`")
	exposedSeriesRe = regexp.MustCompile(`(?m)^([a-zA-Z_:][a-zA-Z0-9_:]*)\{([^}]*)\} `)
	exposedLabelRe  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="([^"]*)"`)
)

type exposedSeries struct {
	name   string
	labels map[string]string
}

func parseExposition(text string) []exposedSeries {
	var out []exposedSeries
	for _, m := range exposedSeriesRe.FindAllStringSubmatch(text, -1) {
		s := exposedSeries{name: m[1], labels: map[string]string{}}
		for _, l := range exposedLabelRe.FindAllStringSubmatch(m[2], -1) {
			s.labels[l[1]] = l[2]
		}
		out = append(out, s)
	}
	return out
}

// TestAlertLinksAndCommands: every link of every alert
// (deploy/prometheus/alerts.yml: dlq_url, tasks_url, worker_url, ...)
// answers without a 4xx from a live `backstop serve`, and every command in
// an alert's description (between backticks) exits 0 — with the labels
// filled in from the real series that `serve` and a `work` process export
// after a real run (a success, a dead letter, a live worker).
func TestAlertLinksAndCommands(t *testing.T) {
	t.Parallel()
	db := testdb.SQLite(t)
	for _, args := range [][]string{
		{"enqueue", "--queue", "alerts", "--kind", "ok", "--payload", "{}"},
		{"enqueue", "--queue", "alerts", "--kind", "bad", "--max-attempts", "1", "--payload", "{}"},
		// A schedule, for the schedule alert's label.
		{"periodic", "add", "alerts_tick", "--every", "1m", "--queue", "alerts", "--kind", "ok"},
		// A message no relay delivers, for the sink alerts' label.
		{"publish", "--sink", "alerts_bus", "--topic", "t", "--payload", "{}"},
	} {
		if _, stderr, code := runCLI(t, db, args...); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, stderr)
		}
	}
	// An event-log relay checkpoint, for the relay alert's labels.
	if s, _ := storeClient(t, db); s.SaveRelayCheckpoint(context.Background(),
		store.RelayCheckpointUpdate{Name: "alerts_feed", Stream: "queue.alerts", Sink: "alerts_bus", Now: time.Now()}) != nil {
		t.Fatal("saving a relay checkpoint failed")
	}
	// A workflow run the worker below finishes, for the workflow alerts'
	// label (their series are per workflow).
	wf := filepath.Join(t.TempDir(), "wf.yaml")
	if err := os.WriteFile(wf, []byte("name: alerts_flow\nqueue: alerts\nsteps:\n  - {id: a, kind: ok}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"workflows", "apply", wf}, {"workflows", "run", "alerts_flow"}} {
		if _, stderr, code := runCLI(t, db, args...); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, stderr)
		}
	}
	base := startServer(t, db)

	logPath := filepath.Join(t.TempDir(), "work.stderr")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	w := exec.Command(binary, "--db", db, "work", "--queue", "alerts", "--permanent-exit-codes", "65", "--metrics-addr", "127.0.0.1:0",
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

	// Wait (the test's deadline bounds it) for the worker's metrics URL,
	// its dead letter, and a per-worker heartbeat series (the store gauges
	// refresh every 10 s).
	metricsURLRe := regexp.MustCompile(`"msg":"serving metrics".*?"url":"([^"]+)"`)
	var series []exposedSeries
	for {
		b, err := os.ReadFile(logPath)
		if err != nil {
			t.Fatal(err)
		}
		if m := metricsURLRe.FindSubmatch(b); m != nil {
			workText := scrapeURL(t, string(m[1]))
			serveText := scrapeURL(t, base+"/metrics")
			if strings.Contains(workText, `backstop_dead_letters_total{kind="bad"`) &&
				strings.Contains(workText, `backstop_workflow_runs_finished_total{`) &&
				strings.Contains(serveText+workText, "backstop_worker_heartbeat_age_seconds{") &&
				strings.Contains(serveText+workText, "backstop_schedule_next_run_timestamp_seconds{") &&
				strings.Contains(serveText+workText, "backstop_relay_lag_seconds{") {
				series = append(parseExposition(serveText), parseExposition(workText)...)
				break
			}
		}
		select {
		case <-exited:
			t.Fatalf("worker exited; log:\n%s", b)
		case <-time.After(50 * time.Millisecond):
		}
	}

	raw, err := os.ReadFile("../../deploy/prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	var rf struct {
		Groups []struct {
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Expr        string            `yaml:"expr"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(raw, &rf); err != nil {
		t.Fatal(err)
	}
	urls, commands := 0, 0
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			metrics := map[string]bool{}
			for _, m := range alertSelectorRe.FindAllString(r.Expr, -1) {
				metrics[m] = true
			}
			// A label's value: from a real series of the alert's own
			// metrics when the run exported one, else of any metric.
			value := func(label string) string {
				for _, own := range []bool{true, false} {
					for _, s := range series {
						if v, ok := s.labels[label]; ok && v != "" && (!own || metrics[s.name]) {
							return v
						}
					}
				}
				t.Fatalf("%s: no real series carries label %q", r.Alert, label)
				return ""
			}
			render := func(s string) string {
				s = strings.ReplaceAll(s, "{{ $externalLabels.backstop_url }}", base)
				return alertLabelRe.ReplaceAllStringFunc(s, func(m string) string {
					return value(alertLabelRe.FindStringSubmatch(m)[1])
				})
			}
			for key, a := range r.Annotations {
				if strings.HasSuffix(key, "_url") {
					urls++
					u := render(a)
					if strings.Contains(u, "{{") || !strings.HasPrefix(u, base+"/") {
						t.Errorf("%s %s: %q does not render to a URL of the server", r.Alert, key, u)
						continue
					}
					resp, err := http.Get(u)
					if err != nil {
						t.Fatal(err)
					}
					resp.Body.Close()
					if resp.StatusCode >= 400 {
						t.Errorf("%s %s: GET %s answered %d", r.Alert, key, u, resp.StatusCode)
					}
				}
			}
			desc := r.Annotations["description"]
			if strings.Contains(alertCommandRe.ReplaceAllString(desc, ""), "backstop ") {
				t.Errorf("%s: a command in the description is not between backticks: %q", r.Alert, desc)
			}
			for _, m := range alertCommandRe.FindAllStringSubmatch(desc, -1) {
				commands++
				args := strings.Fields(render(m[1]))[1:]
				stdout, stderr, code := runCLI(t, db, args...)
				if code != 0 {
					t.Errorf("%s: backstop %s: exit %d\n%s%s", r.Alert, strings.Join(args, " "), code, stdout, stderr)
				}
			}
		}
	}
	if urls < 10 || commands < 10 {
		t.Fatalf("only %d links and %d commands found in the alerts", urls, commands)
	}
	t.Logf("%d links requested, %d commands run", urls, commands)
}
