package control

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"
)

func get(t *testing.T, url string) (int, string) {
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

func TestMetricsExposition(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	m.AddBytes(1000)
	m.AddBytes(24)
	m.AddParts(1)
	m.AddParts(2)
	m.Request("UploadPart")
	m.Request("UploadPart")
	m.Request("PutObject")
	m.Error("upload")
	m.Observe(func() AgentGauges { return AgentGauges{QueueDepth: 4} })
	m.Committed(2000, 90*time.Second)
	m.Committed(1000, 3*time.Hour) // an older step committed late
	m.Dedup(512)

	srv := httptest.NewServer(MetricsHandler(reg, Probes{}, zaptest.NewLogger(t)))
	defer srv.Close()
	code, body := get(t, srv.URL+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d %s", code, body)
	}
	for _, line := range []string{
		"ferry_upload_bytes_total 1024",
		"ferry_upload_parts_total 3",
		`ferry_requests_total{op="UploadPart"} 2`,
		`ferry_requests_total{op="PutObject"} 1`,
		`ferry_errors_total{stage="upload"} 1`,
		"ferry_queue_depth 4",
		"ferry_steps_committed_total 2",
		"ferry_last_committed_step 2000",
		"ferry_dedup_bytes_total 512",
		"ferry_time_to_durable_seconds_count 2",
		"ferry_time_to_durable_seconds_sum 10890",
		`ferry_time_to_durable_seconds_bucket{le="60"} 0`,
		`ferry_time_to_durable_seconds_bucket{le="120"} 1`,
		`ferry_time_to_durable_seconds_bucket{le="14400"} 2`,
	} {
		if !strings.Contains(body, "\n"+line+"\n") {
			t.Errorf("exposition lacks %q", line)
		}
	}
	if t.Failed() {
		t.Log(body)
	}
}

func TestMetricsBeforeAnyCommit(t *testing.T) {
	reg := prometheus.NewRegistry()
	NewMetrics(reg)
	srv := httptest.NewServer(MetricsHandler(reg, Probes{}, nil))
	defer srv.Close()
	_, body := get(t, srv.URL+"/metrics")
	// Step 0 is a real step: "none yet" must not read as 0.
	if !strings.Contains(body, "\nferry_last_committed_step -1\n") {
		t.Errorf("last committed step before any commit is not -1:\n%s", body)
	}
}

func TestMetricsNil(t *testing.T) {
	var m *Metrics
	m.AddBytes(1)
	m.AddParts(1)
	m.AddParts(1)
	m.Request("op")
	m.Error("stage")
	m.Observe(func() AgentGauges { return AgentGauges{} })
	m.Committed(1, time.Second)
	m.Dedup(1)
	m.SetInfo(Info{Version: "v1"})
	m.SetLastCommitTime(time.Now())
	m.SetExpectedCommitInterval(time.Hour)
}

func TestHealthz(t *testing.T) {
	var healthErr atomic.Value // error message, "" when healthy
	healthErr.Store("")
	health := func() error {
		if msg := healthErr.Load().(string); msg != "" {
			return errors.New(msg)
		}
		return nil
	}
	srv := httptest.NewServer(MetricsHandler(prometheus.NewRegistry(), Probes{Health: health}, nil))
	defer srv.Close()
	if code, body := get(t, srv.URL+"/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Fatalf("healthy /healthz: %d %q", code, body)
	}
	healthErr.Store("no commit for 2h: last error: upload part 3: 503 Slow Down")
	code, body := get(t, srv.URL+"/healthz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "no commit for 2h") {
		t.Fatalf("unhealthy /healthz: %d %q", code, body)
	}
}

func TestServeMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	NewMetrics(reg).AddBytes(7)
	m, err := ListenMetrics("127.0.0.1:0", reg, Probes{}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	addr := m.Addr()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Serve(ctx) }()

	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("metrics on %s: %v", addr, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if body := string(b); !strings.Contains(body, "\nferry_upload_bytes_total 7\n") {
		t.Fatalf("served metrics lack the counter:\n%s", body)
	}

	// A second server on the same address fails at once, naming the cause.
	_, err = ListenMetrics(addr, reg, Probes{}, nil)
	if err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("second ListenMetrics on %s: %v, want address already in use", addr, err)
	}

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve after cancel = %v, want nil", err)
	}
	if _, err := http.Get("http://" + addr + "/metrics"); err == nil {
		t.Fatal("metrics still served after Serve returned")
	}
}
