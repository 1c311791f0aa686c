// Package deploy_test checks the shipped operations assets: the Prometheus
// alert rules (promtool check rules, promtool test rules), the Grafana
// dashboard, the OpenTelemetry Collector pipeline, and that every metric
// they use is exported by a real /metrics scrape after a real workload.
package deploy_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

func TestAlertRulesPassPromtool(t *testing.T) {
	pt := promtool(t)
	for _, args := range [][]string{
		{"check", "rules", "prometheus/alerts.yml"},
		{"test", "rules", "prometheus/alerts_test.yml"},
		{"check", "rules", "prometheus/log-events.yml"},
		{"test", "rules", "prometheus/log-events_test.yml"},
	} {
		out, err := exec.Command(pt, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// pendingMetrics are used by the rules or the dashboard but exported by
// code that lands in other branches; each says which. The test fails when
// one of them is exported after all (so the list cannot go stale).
var pendingMetrics = map[string]string{}

type ruleFile struct {
	Groups []struct {
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

func readRules(t *testing.T) ruleFile {
	t.Helper()
	return readRuleFile(t, "prometheus/alerts.yml")
}

// readRuleFile reads a rule file (alerts.yml; log-events.yml, the rules on
// the Collector's counts of the log events).
func readRuleFile(t *testing.T, path string) ruleFile {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rf ruleFile
	if err := yaml.Unmarshal(b, &rf); err != nil {
		t.Fatal(err)
	}
	return rf
}

type dashboard struct {
	Title  string `json:"title"`
	Panels []struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile("grafana/backstop.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("grafana/backstop.json: %v", err)
	}
	return d
}

var metricName = regexp.MustCompile(`\b(backstop_[a-z_]+|messaging_[a-z_]+)\b`)

// seriesName maps a histogram's _bucket/_sum/_count series to itself (the
// scrape lists those series literally).
func usedMetrics(exprs []string) map[string]bool {
	out := map[string]bool{}
	for _, e := range exprs {
		for _, m := range metricName.FindAllString(e, -1) {
			out[m] = true
		}
	}
	return out
}

var scrapedName = regexp.MustCompile(`(?m)^([a-zA-Z_:][a-zA-Z0-9_:]*)[{ ]`)

// TestAssetsUseExportedMetrics: every metric name in the alert rules and
// the dashboard appears in a real scrape (or is explicitly pending).
func TestAssetsUseExportedMetrics(t *testing.T) {
	exported := map[string]bool{}
	for _, m := range scrapedName.FindAllStringSubmatch(scrape(t), -1) {
		exported[m[1]] = true
	}
	var exprs []string
	for _, g := range readRules(t).Groups {
		for _, r := range g.Rules {
			exprs = append(exprs, r.Expr)
		}
	}
	d := readDashboard(t)
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	used := usedMetrics(exprs)
	if len(used) < 10 {
		t.Fatalf("only %d metric names found in the assets: %v", len(used), used)
	}
	var names []string
	for n := range used {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		switch why, pending := pendingMetrics[n]; {
		case exported[n] && pending:
			t.Errorf("%s is exported now: remove it from pendingMetrics (%s)", n, why)
		case !exported[n] && !pending:
			t.Errorf("%s is used by the rules or the dashboard but not exported", n)
		}
	}
	for n := range pendingMetrics {
		if !used[n] {
			t.Errorf("pendingMetrics lists %s, which no asset uses", n)
		}
	}
}

// TestAlertAnnotations: every alert links to a view, names what it is
// about (its queue, or its worker) and a runbook section of its own that
// exists. cmd/backstop's TestAlertLinksAndCommands requests the links and
// runs the commands.
func TestAlertAnnotations(t *testing.T) {
	runbooks, err := os.ReadFile("../docs/runbooks.md")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"BackstopDLQGrew", "BackstopDLQNotEmpty", "BackstopStuckLease", "BackstopTooComplexTask",
		"BackstopTooComplexDeadLetter", "BackstopFailureRatioHigh", "BackstopWorkersStalled", "BackstopNoWorkers",
		"BackstopWorkerHeartbeatLost", "BackstopQueueWaitSLO", "BackstopOrderingTimeoutRatioHigh",
		"BackstopOrderingCircuitBreakerFrequent", "BackstopOrderingBacklogGrowing", "BackstopDLQOldestOpenAge",
		"BackstopDLQPurgeBelowFloor", "BackstopWorkflowRunsHalted", "BackstopWorkflowCompensationFailed",
		"BackstopScheduleNotEnqueuing", "BackstopAttemptsStuckLogEvents", "BackstopWorkflowRunSLAMissed", "BackstopWorkflowStepSLAMissed",
		"BackstopRelayLagging", "BackstopSinkLagging", "BackstopSinkUndeliverable"}
	var got []string
	logRules := readRuleFile(t, "prometheus/log-events.yml")
	for _, g := range append(readRules(t).Groups, logRules.Groups...) {
		for _, r := range g.Rules {
			got = append(got, r.Alert)
			a := r.Annotations
			if a["summary"] == "" || a["description"] == "" || a["runbook"] == "" {
				t.Errorf("%s: summary, description and runbook are required: %v", r.Alert, a)
			}
			if a["runbook"] != "docs/runbooks.md#"+strings.ToLower(r.Alert) || !strings.Contains(string(runbooks), "\n## "+r.Alert+"\n") {
				t.Errorf("%s: runbook %q: want its own section \"## %s\" in docs/runbooks.md", r.Alert, a["runbook"], r.Alert)
			}
			if a["dlq_url"] == "" && a["tasks_url"] == "" && a["worker_url"] == "" && a["workers_url"] == "" && a["runs_url"] == "" &&
				a["schedule_url"] == "" && a["relay_url"] == "" {
				t.Errorf("%s: wants a link (dlq_url, tasks_url, worker_url, workers_url, runs_url, schedule_url or relay_url): %v", r.Alert, a)
			}
			switch {
			case r.Alert == "BackstopNoWorkers", r.Alert == "BackstopDLQPurgeBelowFloor": // fleet-wide; a process's configuration
			case strings.Contains(r.Expr, "backstop_workflow_"):
				if a["workflow"] == "" {
					t.Errorf("%s: wants a workflow annotation: %v", r.Alert, a)
				}
			case strings.Contains(r.Expr, "backstop_schedule_"):
				if a["schedule"] == "" {
					t.Errorf("%s: wants a schedule annotation: %v", r.Alert, a)
				}
			case strings.Contains(r.Expr, "backstop_relay_"):
				if a["checkpoint"] == "" {
					t.Errorf("%s: wants a checkpoint annotation: %v", r.Alert, a)
				}
			case strings.Contains(r.Expr, "worker_id"):
				if a["worker_id"] == "" {
					t.Errorf("%s: wants a worker_id annotation: %v", r.Alert, a)
				}
			case a["queue"] == "":
				t.Errorf("%s: wants a queue annotation: %v", r.Alert, a)
			}
		}
	}
	for _, w := range want {
		if !slices.Contains(got, w) {
			t.Errorf("alert %s missing from prometheus/alerts.yml", w)
		}
	}
}

// TestCollectorPipelines: the Collector config parses and every pipeline's
// receivers, processors and exporters are defined; traces, metrics and
// logs all have a pipeline receiving OTLP.
func TestCollectorPipelines(t *testing.T) {
	b, err := os.ReadFile("otel-collector.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Receivers  map[string]any `yaml:"receivers"`
		Processors map[string]any `yaml:"processors"`
		Exporters  map[string]any `yaml:"exporters"`
		Extensions map[string]any `yaml:"extensions"`
		Connectors map[string]struct {
			Logs map[string]struct {
				Description string   `yaml:"description"`
				Conditions  []string `yaml:"conditions"`
				Attributes  []struct {
					Key          string `yaml:"key"`
					DefaultValue string `yaml:"default_value"`
				} `yaml:"attributes"`
			} `yaml:"logs"`
		} `yaml:"connectors"`
		Service struct {
			Extensions []string `yaml:"extensions"`
			Pipelines  map[string]struct {
				Receivers  []string `yaml:"receivers"`
				Processors []string `yaml:"processors"`
				Exporters  []string `yaml:"exporters"`
			} `yaml:"pipelines"`
		} `yaml:"service"`
	}
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		t.Fatalf("otel-collector.yaml: %v", err)
	}
	for _, e := range c.Service.Extensions {
		if _, ok := c.Extensions[e]; !ok {
			t.Errorf("service extension %q is not defined", e)
		}
	}
	for _, signal := range []string{"traces", "metrics", "logs"} {
		p, ok := c.Service.Pipelines[signal]
		if !ok {
			t.Errorf("no %s pipeline", signal)
			continue
		}
		if !slices.Contains(p.Receivers, "otlp") {
			t.Errorf("%s pipeline does not receive OTLP: %v", signal, p.Receivers)
		}
	}
	for name, p := range c.Service.Pipelines {
		if len(p.Exporters) == 0 {
			t.Errorf("%s pipeline exports nowhere", name)
		}
		for kind, names := range map[string][]string{"receiver": p.Receivers, "processor": p.Processors, "exporter": p.Exporters} {
			defined := map[string]map[string]any{"receiver": c.Receivers, "processor": c.Processors, "exporter": c.Exporters}[kind]
			for _, n := range names {
				_, ok := defined[n]
				if _, conn := c.Connectors[n]; conn && kind != "processor" {
					ok = true
				}
				if !ok {
					t.Errorf("%s pipeline: %s %q is not defined", name, kind, n)
				}
			}
		}
	}
	// The count connector counts the log events Backstop writes, by their
	// names and attributes (internal/engine/logevents.go), into the
	// counters log-events.yml reads.
	events, err := os.ReadFile("../internal/engine/logevents.go")
	if err != nil {
		t.Fatal(err)
	}
	rules, err := os.ReadFile("prometheus/log-events.yml")
	if err != nil {
		t.Fatal(err)
	}
	counted := 0
	nameRe := regexp.MustCompile(`"(backstop\.[a-z_.]+)"`)
	for cname, conn := range c.Connectors {
		for metric, m := range conn.Logs {
			counted++
			if len(m.Conditions) == 0 {
				t.Errorf("connector %s: %s counts every record", cname, metric)
			}
			for _, cond := range m.Conditions {
				for _, ev := range nameRe.FindAllStringSubmatch(cond, -1) {
					if !strings.Contains(string(events), `"`+ev[1]+`"`) {
						t.Errorf("connector %s: %s: condition %q names an event Backstop does not write", cname, metric, cond)
					}
				}
			}
			for _, a := range m.Attributes {
				if !slices.Contains([]string{"queue", "kind", "reason", "outcome"}, a.Key) {
					t.Errorf("connector %s: %s groups by %q, not an attribute of the events", cname, metric, a.Key)
				}
			}
			prom := strings.ReplaceAll(metric, ".", "_") + "_total"
			if metric != "backstop.log.dead_letters" && !strings.Contains(string(rules), prom) {
				t.Errorf("connector %s: %s (%s) is used by no rule of log-events.yml", cname, metric, prom)
			}
		}
	}
	if counted == 0 {
		t.Error("no count connector for the log events")
	}
}

// TestDashboard: the dashboard parses and shows what it must.
func TestDashboard(t *testing.T) {
	d := readDashboard(t)
	var all []string
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			all = append(all, tg.Expr)
		}
	}
	joined := strings.Join(all, "\n")
	for _, want := range []string{"backstop_attempts_total", "backstop_queue_wait_seconds_bucket", "backstop_task_duration_seconds_bucket",
		"backstop_dead_letters_total", "backstop_dlq_size", "backstop_lease_oldest_age_seconds", "backstop_workers",
		"backstop_ordering_buffered_total"} {
		if !strings.Contains(joined, want) {
			t.Errorf("the dashboard does not show %s", want)
		}
	}
}
