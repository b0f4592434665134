package agent

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/ferrylabs/ferry/agent/control"
	"github.com/ferrylabs/ferry/internal/s3store"
	"github.com/ferrylabs/ferry/internal/s3test"
	"github.com/ferrylabs/ferry/internal/trainsim"
)

// scrape reads url (a /metrics) into values by series, written as
// name{label="value",...} with the labels sorted, or name alone.
func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse %s: %v", url, err)
	}
	out := map[string]float64{}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			sort.Strings(labels)
			key := name
			if len(labels) > 0 {
				key += "{" + strings.Join(labels, ",") + "}"
			}
			switch {
			case m.Gauge != nil:
				out[key] = m.GetGauge().GetValue()
			case m.Counter != nil:
				out[key] = m.GetCounter().GetValue()
			}
		}
	}
	return out
}

func probe(t *testing.T, url string) (int, string) {
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
	return resp.StatusCode, string(b)
}

// With the S3 server stopped mid-run (issue 48): the step waiting out its
// retry backoff is counted in the queue and as retrying, with its bytes
// and its age; /readyz fails, naming the store, while /healthz stays ok;
// once the server is back the step commits, the queue empties and the
// last commit's time is set.
func TestAgentStoreDownMetricsAndReadiness(t *testing.T) {
	srv := s3test.Start(t)
	bucket := srv.NewBucket(t)
	h := &harness{t: t, counters: &s3store.Counters{}, prefix: "run", watch: t.TempDir(), state: t.TempDir(),
		st: srv.StoreWith(t, s3store.Config{Bucket: bucket, MaxAttempts: 1})}
	reg := prometheus.NewRegistry()
	metrics := control.NewMetrics(reg)
	h.start(func(o *Options) {
		o.Metrics = metrics
		o.ReadyStoreTimeout = time.Second
		o.Detect.ExpectedRanks = 1
		o.RetryMin, o.RetryMax = 100*time.Millisecond, 300*time.Millisecond
	})
	web := httptest.NewServer(control.MetricsHandler(reg, control.Probes{Ready: h.agent.Ready}, nil))
	defer web.Close()
	start := time.Now()
	waitFor(t, "/readyz ok after the start", 30*time.Second, func() bool { c, _ := probe(t, web.URL+"/readyz"); return c == http.StatusOK })

	srv.Stop()
	sim := trainsim.Options{Dir: h.watch, Ranks: 1, FileSize: 1 << 20, Seed: 5}
	if err := trainsim.WriteStep(context.Background(), sim, 5); err != nil {
		t.Fatal(err)
	}
	var m map[string]float64
	waitFor(t, "the step counted in the queue while it waits for a retry", 30*time.Second, func() bool {
		m = scrape(t, web.URL+"/metrics")
		return m[`ferry_steps{state="retrying"}`] == 1 && m["ferry_queue_depth"] == 1
	})
	if got := m[`ferry_step_bytes{state="retrying"}`]; got < 1<<20 {
		t.Errorf("retrying bytes %v, want the step's (at least 1 MiB)", got)
	}
	if age := m["ferry_oldest_undurable_step_age_seconds"]; age <= 0 || age > time.Since(start).Seconds()+1 {
		t.Errorf("oldest undurable age %v, want > 0 and at most the test's %v", age, time.Since(start))
	}
	var reason string
	waitFor(t, "/readyz to fail", 30*time.Second, func() bool {
		var code int
		code, reason = probe(t, web.URL+"/readyz")
		return code == http.StatusServiceUnavailable
	})
	if m = scrape(t, web.URL+"/metrics"); m["ferry_store_failing_seconds"] < 1 {
		t.Errorf("ferry_store_failing_seconds %v with /readyz failing, want at least the 1s timeout", m["ferry_store_failing_seconds"])
	}
	if !strings.Contains(reason, "the store has not answered for") || strings.Count(reason, "\n") != 1 {
		t.Errorf("/readyz reason %q, want one line naming the store", reason)
	}
	if code, body := probe(t, web.URL+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz with the store down: %d %q, want ok (a restart does not help)", code, body)
	}

	srv.Restart(t)
	if left := h.flush(60 * time.Second); len(left) != 0 {
		t.Fatalf("not committed after the server came back: %v", left)
	}
	waitFor(t, "/readyz ok again", 30*time.Second, func() bool { c, _ := probe(t, web.URL+"/readyz"); return c == http.StatusOK })
	m = scrape(t, web.URL+"/metrics")
	for series, want := range map[string]float64{"ferry_queue_depth": 0, `ferry_steps{state="retrying"}`: 0,
		"ferry_oldest_undurable_step_age_seconds": 0, "ferry_last_committed_step": 5, "ferry_store_failing_seconds": 0} {
		if m[series] != want {
			t.Errorf("%s = %v after the commit, want %v", series, m[series], want)
		}
	}
	if ts := m["ferry_last_commit_timestamp_seconds"]; ts < float64(start.Unix()) || ts > float64(time.Now().Unix()+1) {
		t.Errorf("last commit time %v, want between the test's start %d and now", ts, start.Unix())
	}
	h.stop()
	if err := h.agent.Ready(); err == nil || !strings.Contains(err.Error(), "stopped") {
		t.Errorf("Ready after the agent stopped: %v", err)
	}
}
