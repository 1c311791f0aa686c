package deploy_test

import (
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// The series a real /metrics scrape carries (scrape_test.go's workload),
// recorded in testdata/scrape-series.txt: one line per series, its value
// dropped and the values of the labels that differ per run (worker_id,
// host, the SDK version) replaced by "*". The rule tests
// (prometheus/alerts_test.yml) must feed series with these names and label
// sets, and every label a rule or a dashboard query uses must be on the
// real series of the metrics it reads.
//
// After a change to the exported metrics, rewrite the fixture with
//
//	BACKSTOP_UPDATE_SCRAPE_FIXTURE=1 go test -run TestScrapeFixture ./deploy/
const fixturePath = "testdata/scrape-series.txt"

var (
	seriesLine    = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?\s+\S+$`)
	labelPair     = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)
	volatileLabel = map[string]bool{"worker_id": true, "host": true, "telemetry_sdk_version": true}
)

// series is one series: its name and labels.
type series struct {
	name   string
	labels map[string]string
}

func (s series) keys() string {
	ks := make([]string, 0, len(s.labels))
	for k := range s.labels {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return s.name + "{" + strings.Join(ks, ",") + "}"
}

func (s series) String() string {
	ks := make([]string, 0, len(s.labels))
	for k, v := range s.labels {
		ks = append(ks, k+`="`+v+`"`)
	}
	sort.Strings(ks)
	return s.name + "{" + strings.Join(ks, ",") + "}"
}

func parseSeries(t *testing.T, sel string) series {
	t.Helper()
	name, rest, _ := strings.Cut(sel, "{")
	s := series{name: strings.TrimSpace(name), labels: map[string]string{}}
	for _, m := range labelPair.FindAllStringSubmatch(rest, -1) {
		s.labels[m[1]] = m[2]
	}
	return s
}

// scrapeSeries is the series of an exposition, volatile values masked.
func scrapeSeries(t *testing.T, text string) []string {
	t.Helper()
	seen := map[string]bool{}
	for _, line := range strings.Split(text, "\n") {
		m := seriesLine.FindStringSubmatch(strings.TrimSpace(line))
		if m == nil || strings.HasPrefix(line, "#") {
			continue
		}
		s := parseSeries(t, m[1]+m[2])
		for k := range s.labels {
			if volatileLabel[k] {
				s.labels[k] = "*"
			}
		}
		seen[s.String()] = true
	}
	out := make([]string, 0, len(seen))
	for s := range seen {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

// fixture reads the recorded series: by name and label set, and the
// values each label of each metric takes.
type fixtureIndex struct {
	keySets map[string]bool                       // name{k1,k2}
	labels  map[string]map[string]bool            // name → label names
	values  map[string]map[string]map[string]bool // name → label → values
}

func readFixture(t *testing.T) fixtureIndex {
	t.Helper()
	b, err := os.ReadFile(fixturePath)
	if err != nil {
		t.Fatalf("%v (write it with BACKSTOP_UPDATE_SCRAPE_FIXTURE=1)", err)
	}
	ix := fixtureIndex{keySets: map[string]bool{}, labels: map[string]map[string]bool{}, values: map[string]map[string]map[string]bool{}}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		s := parseSeries(t, line)
		ix.keySets[s.keys()] = true
		if ix.labels[s.name] == nil {
			ix.labels[s.name], ix.values[s.name] = map[string]bool{}, map[string]map[string]bool{}
		}
		for k, v := range s.labels {
			ix.labels[s.name][k] = true
			if ix.values[s.name][k] == nil {
				ix.values[s.name][k] = map[string]bool{}
			}
			ix.values[s.name][k][v] = true
		}
	}
	return ix
}

// TestScrapeFixture: the recorded series still are what the exporter
// emits after the workload: the same metric names with the same label
// sets (values may differ run to run).
func TestScrapeFixture(t *testing.T) {
	got := scrapeSeries(t, scrape(t))
	if os.Getenv("BACKSTOP_UPDATE_SCRAPE_FIXTURE") == "1" {
		if err := os.WriteFile(fixturePath, []byte(strings.Join(got, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s (%d series)", fixturePath, len(got))
	}
	ix := readFixture(t)
	now := map[string]bool{}
	for _, line := range got {
		now[parseSeries(t, line).keys()] = true
	}
	for k := range now {
		if !ix.keySets[k] {
			t.Errorf("the exporter emits %s, which %s lacks (rewrite it: BACKSTOP_UPDATE_SCRAPE_FIXTURE=1)", k, fixturePath)
		}
	}
	for k := range ix.keySets {
		if !now[k] {
			t.Errorf("%s records %s, which the exporter no longer emits (rewrite it: BACKSTOP_UPDATE_SCRAPE_FIXTURE=1)", fixturePath, k)
		}
	}
}

// targetLabels are added by Prometheus at scrape time, not by the exporter.
var targetLabels = map[string]bool{"instance": true, "job": true}

// enumLabels take values from a fixed set; a rule test feeding a value
// the real run did not emit tests a series that does not exist.
var enumLabels = map[string]bool{"outcome": true, "result": true, "state": true, "status": true, "reason": true,
	"too_complex": true, "merged": true, "le": true}

// TestRuleTestsFeedRealSeries: every input series of the rule tests has
// the name and label set of a recorded series (plus target labels), and
// its enumerated labels take values the real run emitted.
func TestRuleTestsFeedRealSeries(t *testing.T) {
	ix := readFixture(t)
	b, err := os.ReadFile("prometheus/alerts_test.yml")
	if err != nil {
		t.Fatal(err)
	}
	var tf struct {
		Tests []struct {
			InputSeries []struct {
				Series string `yaml:"series"`
			} `yaml:"input_series"`
		} `yaml:"tests"`
	}
	if err := yaml.Unmarshal(b, &tf); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, tc := range tf.Tests {
		for _, in := range tc.InputSeries {
			n++
			s := parseSeries(t, in.Series)
			for k := range s.labels {
				if targetLabels[k] {
					delete(s.labels, k)
				}
			}
			if !ix.keySets[s.keys()] {
				t.Errorf("rule test input %s: no recorded series has this name and label set", in.Series)
				continue
			}
			for k, v := range s.labels {
				if enumLabels[k] && !ix.values[s.name][k][v] {
					t.Errorf("rule test input %s: %s=%q never appears on the real %s", in.Series, k, v, s.name)
				}
			}
		}
	}
	if n < 20 {
		t.Fatalf("only %d input series found in the rule tests", n)
	}
}

var (
	selectorRe   = regexp.MustCompile(`\b((?:backstop|messaging)_[a-z_]+)\b(\{[^}]*\})?`)
	matcherRe    = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)`)
	groupingRe   = regexp.MustCompile(`\b(?:by|on|ignoring|without)\s*\(([^)]*)\)`)
	labelsRe     = regexp.MustCompile(`\$labels\.([a-zA-Z_][a-zA-Z0-9_]*)`)
	queryTmplRe  = regexp.MustCompile("printf `([^`]*)`")
	labelValueRe = regexp.MustCompile(`label_values\(\s*([a-z_]+)\s*,\s*([a-z_]+)\s*\)`)
)

// checkLabels fails unless every label a rule or query uses exists on the
// recorded series of the metrics it reads: matchers on their own metric,
// grouping labels and $labels on every metric of the expression (le: on
// the histogram buckets). annotations are an alert's; the queries of their
// templates (printf `...` | query) are checked like the expression.
func checkLabels(t *testing.T, ix fixtureIndex, what, expr string, annotations []string) {
	t.Helper()
	promql := expr
	for _, a := range annotations {
		for _, q := range queryTmplRe.FindAllStringSubmatch(a, -1) {
			promql += "\n" + q[1]
		}
	}
	var metrics []string
	for _, m := range selectorRe.FindAllStringSubmatch(promql, -1) {
		name := m[1]
		if ix.labels[name] == nil {
			t.Errorf("%s: %s is not a recorded series", what, name)
			continue
		}
		metrics = append(metrics, name)
		for _, mm := range matcherRe.FindAllStringSubmatch(m[2], -1) {
			if !ix.labels[name][mm[1]] {
				t.Errorf("%s: %s has no label %q on the real series (it has %v)", what, name, mm[1], keysOf(ix.labels[name]))
			}
		}
	}
	var used []string
	for _, g := range groupingRe.FindAllStringSubmatch(promql, -1) {
		for _, l := range strings.Split(g[1], ",") {
			if l = strings.TrimSpace(l); l != "" {
				used = append(used, l)
			}
		}
	}
	for _, a := range annotations {
		for _, m := range labelsRe.FindAllStringSubmatch(a, -1) {
			used = append(used, m[1])
		}
	}
	for _, l := range used {
		for _, name := range metrics {
			if l == "le" && !strings.HasSuffix(name, "_bucket") {
				continue
			}
			if !ix.labels[name][l] {
				t.Errorf("%s: uses label %q, which the real %s does not carry (it has %v)", what, l, name, keysOf(ix.labels[name]))
			}
		}
	}
}

func keysOf(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestRulesAndDashboardUseRealLabels: every label every alert rule uses
// (matchers, by/on clauses, $labels in annotations, queries in
// annotations) and every label the dashboard's queries and its queue
// filter use exists on the real series.
func TestRulesAndDashboardUseRealLabels(t *testing.T) {
	ix := readFixture(t)
	for _, g := range readRules(t).Groups {
		for _, r := range g.Rules {
			var ann []string
			for _, v := range r.Annotations {
				ann = append(ann, v)
			}
			checkLabels(t, ix, r.Alert, r.Expr, ann)
		}
	}
	b, err := os.ReadFile("grafana/backstop.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range readDashboard(t).Panels {
		for _, tg := range p.Targets {
			checkLabels(t, ix, "dashboard panel "+p.Title, tg.Expr, nil)
		}
	}
	vars := labelValueRe.FindAllStringSubmatch(string(b), -1)
	if len(vars) == 0 {
		t.Fatal("the dashboard has no label_values() filter")
	}
	for _, m := range vars {
		if !ix.labels[m[1]][m[2]] {
			t.Errorf("dashboard filter label_values(%s, %s): the real %s has no label %s", m[1], m[2], m[1], m[2])
		}
	}
}
