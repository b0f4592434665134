package control

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func TestAgentGaugesExposition(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	now := time.Unix(1_700_000_000, 0)
	m.stepsCol.now = func() time.Time { return now }
	var g AgentGauges
	g.Add(GaugeSettling, 10)
	g.Add(GaugeWaiting, 100)
	g.Add(GaugeRetrying, 1000)
	g.Add(GaugeRetrying, 24)
	g.QueueDepth = 3
	g.OldestUndurable = now.Add(-90 * time.Second)
	g.StoreFailingSince = now.Add(-42 * time.Second)
	var cur atomic.Pointer[AgentGauges] // read by the server's goroutine
	cur.Store(&g)
	m.Observe(func() AgentGauges { return *cur.Load() })
	m.SetInfo(Info{Version: "v1.2.3", Destination: "s3://AKIAKEY:secret@bucket/run?token=x", Run: "job-7"})
	m.SetLastCommitTime(time.Unix(1_600_000_000, 0))
	m.SetLastCommitTime(time.Unix(1_500_000_000, 0)) // older: ignored
	m.SetExpectedCommitInterval(30 * time.Minute)

	srv := httptest.NewServer(MetricsHandler(reg, Probes{}, nil))
	defer srv.Close()
	_, body := get(t, srv.URL+"/metrics")
	for _, line := range []string{
		`ferry_steps{state="settling"} 1`,
		`ferry_steps{state="waiting"} 1`,
		`ferry_steps{state="uploading"} 0`, // empty states are exported as 0
		`ferry_steps{state="retrying"} 2`,
		`ferry_steps{state="failed"} 0`,
		`ferry_steps{state="node-done"} 0`,
		`ferry_step_bytes{state="retrying"} 1024`,
		`ferry_step_bytes{state="settling"} 10`,
		"ferry_queue_depth 3",
		"ferry_oldest_undurable_step_age_seconds 90",
		"ferry_store_failing_seconds 42",
		`ferry_info{destination="s3://bucket/run",run="job-7",version="v1.2.3"} 1`,
		"ferry_last_commit_timestamp_seconds 1.6e+09",
		"ferry_expected_commit_interval_seconds 1800",
	} {
		if !strings.Contains(body, "\n"+line+"\n") {
			t.Errorf("exposition lacks %q", line)
		}
	}
	if strings.Contains(body, "secret") || strings.Contains(body, "AKIAKEY") || strings.Contains(body, "token") {
		t.Errorf("exposition holds the destination's credentials")
	}
	if t.Failed() {
		t.Log(body)
	}

	// Nothing undurable: the age is 0, not the age of the epoch.
	cur.Store(&AgentGauges{})
	_, body = get(t, srv.URL+"/metrics")
	for _, line := range []string{"ferry_oldest_undurable_step_age_seconds 0", "ferry_queue_depth 0", "ferry_store_failing_seconds 0"} {
		if !strings.Contains(body, "\n"+line+"\n") {
			t.Errorf("nothing undurable, store answering: exposition lacks %q", line)
		}
	}
}

func TestReadyz(t *testing.T) {
	var readyErr atomic.Pointer[error] // the probe's error; nil: ready
	p := Probes{Ready: func() error {
		if err := readyErr.Load(); err != nil {
			return *err
		}
		return nil
	}}
	srv := httptest.NewServer(MetricsHandler(prometheus.NewRegistry(), p, nil))
	defer srv.Close()
	if code, body := get(t, srv.URL+"/readyz"); code != http.StatusOK || body != "ok\n" {
		t.Fatalf("ready /readyz: %d %q", code, body)
	}
	unready := errors.New("the store has not answered for 3m0s:\nlast error: dial tcp: connection refused")
	readyErr.Store(&unready)
	code, body := get(t, srv.URL+"/readyz")
	if code != http.StatusServiceUnavailable || body != "the store has not answered for 3m0s: last error: dial tcp: connection refused\n" {
		t.Fatalf("unready /readyz: %d %q, want 503 and the reason on one line", code, body)
	}
	// /healthz keeps its meaning: an unready agent is alive.
	if code, body := get(t, srv.URL+"/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Fatalf("/healthz of an unready agent: %d %q", code, body)
	}
}
