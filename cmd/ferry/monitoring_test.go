package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/ferrylabs/ferry/internal/s3test"
	"github.com/ferrylabs/ferry/internal/trainsim"
)

// deploy/monitoring's alert rules and dashboard query only series a real
// agent serves: an agent commits a step, and every metric name each rule
// and each panel's query uses is looked for in its /metrics (a renamed or
// dropped series fails here, not in an operator's silent alert).
func TestMonitoringSeriesExist(t *testing.T) {
	srv := s3test.Shared(t)
	bucket := srv.NewBucket(t)
	watch, state := t.TempDir(), t.TempDir()
	if err := trainsim.WriteStep(context.Background(), trainsim.Options{Dir: watch, Ranks: 1, FileSize: 1 << 20, Seed: 3}, 10); err != nil {
		t.Fatal(err)
	}
	proc := startAgentProcess(t, srv.Env(), "--watch", watch, "--to", "s3://"+bucket+"/run", "--state-dir", state,
		"--layout", "composer", "--settle", "300ms", "--expected-ranks", "1", "--metrics-addr", "127.0.0.1:0")
	var addr string
	waitFor(t, "the metrics endpoint", 30*time.Second, func() bool {
		m := regexp.MustCompile(`metrics listening.*"addr": "([0-9.:]+)"`).FindStringSubmatch(proc.logs.String())
		if m != nil {
			addr = m[1]
		}
		return m != nil
	})
	var exposition string
	waitFor(t, "step 10 committed", 60*time.Second, func() bool {
		exposition = httpGet(t, "http://"+addr+"/metrics")
		return strings.Contains(exposition, "\nferry_last_committed_step 10\n")
	})
	if body := httpGet(t, "http://"+addr+"/readyz"); body != "ok\n" {
		t.Errorf("/readyz of a running agent: %q", body)
	}
	served := exposedNames(exposition)

	queries := alertQueries(t, "../../deploy/monitoring/ferry-alerts.yml")
	for name, q := range dashboardQueries(t, "../../deploy/monitoring/ferry-dashboard.json") {
		queries[name] = q
	}
	if len(queries) < 15 {
		t.Fatalf("found %d rules and panel queries, want at least 15: %v", len(queries), queries)
	}
	for where, q := range queries {
		names := promqlMetricNames(q)
		if len(names) == 0 {
			t.Errorf("%s: no metric name found in %q", where, q)
		}
		for _, n := range names {
			if !served[n] {
				t.Errorf("%s uses %s, which the agent does not serve (query %q)", where, n, q)
			}
		}
	}
	if err := proc.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := waitExit(t, proc.Cmd, time.Minute); err != nil {
		t.Errorf("agent after SIGTERM: %v", err)
	}
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// exposedNames are the series names of a text exposition (a histogram's
// _bucket, _sum and _count included).
func exposedNames(exposition string) map[string]bool {
	names := map[string]bool{}
	for line := range strings.SplitSeq(exposition, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if i := strings.IndexAny(line, "{ "); i > 0 {
			names[line[:i]] = true
		}
	}
	return names
}

// alertQueries returns each rule's expression by alert name.
func alertQueries(t *testing.T, path string) map[string]string {
	t.Helper()
	var rules struct {
		Groups []struct {
			Rules []struct{ Alert, Record, Expr string }
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &rules); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	out := map[string]string{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			out["rule "+r.Alert+r.Record] = r.Expr
		}
	}
	return out
}

// dashboardQueries returns every "expr" of a Grafana dashboard and its
// variables' label_values queries, by panel title.
func dashboardQueries(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
		Templating struct {
			List []struct {
				Name       string
				Definition string
			}
		}
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	out := map[string]string{}
	for _, p := range d.Panels {
		for i, tg := range p.Targets {
			out["panel "+p.Title+" query "+string(rune('A'+i))] = tg.Expr
		}
	}
	for _, v := range d.Templating.List {
		if m := regexp.MustCompile(`label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)`).FindStringSubmatch(v.Definition); m != nil {
			out["variable "+v.Name] = m[1]
		}
	}
	return out
}

var (
	promqlStrings  = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'`)
	promqlMatchers = regexp.MustCompile(`\{[^}]*\}`)
	promqlRanges   = regexp.MustCompile(`\[[^\]]*\]`)
	promqlGrouping = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promqlIdent    = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*(\s*\()?`)
	promqlKeywords = []string{"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left", "group_right", "inf", "nan"}
)

// promqlMetricNames returns the metric names a PromQL expression selects:
// what is left once strings, label matchers, ranges and grouping clauses
// are taken out, less function names (followed by a parenthesis) and
// keywords.
func promqlMetricNames(q string) []string {
	for _, re := range []*regexp.Regexp{promqlStrings, promqlMatchers, promqlRanges, promqlGrouping} {
		q = re.ReplaceAllString(q, " ")
	}
	var names []string
	for _, m := range promqlIdent.FindAllStringSubmatchIndex(q, -1) {
		if m[2] >= 0 { // a function or an aggregation
			continue
		}
		if m[0] > 0 && strings.ContainsAny(q[m[0]-1:m[0]], ".0123456789$") {
			continue // a number's exponent, or a variable
		}
		name := q[m[0]:m[1]]
		if !slices.Contains(promqlKeywords, strings.ToLower(name)) && !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	return names
}

func TestPromqlMetricNames(t *testing.T) {
	for q, want := range map[string]string{
		`time() - ferry_last_commit_timestamp_seconds{instance=~"$instance"} > ferry_expected_commit_interval_seconds and on (job) up`: "ferry_last_commit_timestamp_seconds ferry_expected_commit_interval_seconds up",
		`histogram_quantile(0.9, sum by (le) (rate(ferry_time_to_durable_seconds_bucket{a="b"}[$__rate_interval])))`:                   "ferry_time_to_durable_seconds_bucket",
		`increase(ferry_steps_lost_total[1h]) > 1e3 or sum without (state) (ferry_steps) > bool 0`:                                     "ferry_steps_lost_total ferry_steps",
	} {
		if got := strings.Join(promqlMetricNames(q), " "); got != want {
			t.Errorf("promqlMetricNames(%q) = %q, want %q", q, got, want)
		}
	}
}
