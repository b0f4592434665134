package control

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
)

// DefaultMetricsAddr is loopback only: metrics are not reachable from other
// hosts unless --metrics-addr says so.
const DefaultMetricsAddr = "127.0.0.1:9464"

// timeToDurableBuckets span a small checkpoint on a fast link (seconds) to
// a multi-terabyte one on a slow or throttled link (hours).
var timeToDurableBuckets = []float64{1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400, 28800}

// ErrorStages are the stages ferry_errors_total counts (Metrics.Error).
var ErrorStages = []string{"detect", "upload", "commit", "prune"}

// Metrics are the agent's Prometheus collectors. Every method is safe on a
// nil *Metrics and does nothing, so tests and callers without metrics pass
// nil instead of a fake.
type Metrics struct {
	uploadBytes    prometheus.Counter
	uploadParts    prometheus.Counter
	requests       *prometheus.CounterVec
	errors         *prometheus.CounterVec
	stepsCommitted prometheus.Counter
	lastCommitted  prometheus.Gauge
	timeToDurable  prometheus.Histogram
	dedupBytes     prometheus.Counter
	stepsLost      prometheus.Counter
	lastCommitTS   prometheus.Gauge
	expectedEvery  prometheus.Gauge
	info           *prometheus.GaugeVec
	stepsCol       *stepsCollector

	mu           sync.Mutex
	last         int64     // highest committed step, -1 if none
	lastCommitAt time.Time // newest commit, zero if none
}

// NewMetrics creates the collectors and registers them with reg (none if
// reg is nil). It panics if reg already holds them, as registering twice is
// a programming error.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	f := promauto.With(reg)
	m := &Metrics{
		uploadBytes: f.NewCounter(prometheus.CounterOpts{
			Name: "ferry_upload_bytes_total",
			Help: "Bytes of checkpoint data uploaded (parts and single-request objects).",
		}),
		uploadParts: f.NewCounter(prometheus.CounterOpts{
			Name: "ferry_upload_parts_total",
			Help: "Multipart upload parts sent.",
		}),
		requests: f.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_requests_total",
			Help: "S3 requests by operation, retries included.",
		}, []string{"op"}),
		errors: f.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_errors_total",
			Help: "Failures by pipeline stage (detect, upload, commit, ...).",
		}, []string{"stage"}),
		stepsCommitted: f.NewCounter(prometheus.CounterOpts{
			Name: "ferry_steps_committed_total",
			Help: "Steps whose manifest was committed by this agent.",
		}),
		lastCommitted: f.NewGauge(prometheus.GaugeOpts{
			Name: "ferry_last_committed_step",
			Help: "Highest step committed by this agent, -1 before the first.",
		}),
		timeToDurable: f.NewHistogram(prometheus.HistogramOpts{
			Name:    "ferry_time_to_durable_seconds",
			Help:    "Time from the last write of a step's files (their newest modification time) to its manifest commit.",
			Buckets: timeToDurableBuckets,
		}),
		dedupBytes: f.NewCounter(prometheus.CounterOpts{
			Name: "ferry_dedup_bytes_total",
			Help: "Bytes not uploaded because they were unchanged since an earlier step.",
		}),
		stepsLost: f.NewCounter(prometheus.CounterOpts{
			Name: "ferry_steps_lost_total",
			Help: "Steps complete on disk that were deleted before they could be uploaded.",
		}),
		lastCommitTS: f.NewGauge(prometheus.GaugeOpts{
			Name: "ferry_last_commit_timestamp_seconds",
			Help: "Unix time of the newest commit of a whole step this agent knows of (its own, or another node's of a step it took part in; the journal's at start); 0 before the first.",
		}),
		expectedEvery: f.NewGauge(prometheus.GaugeOpts{
			Name: "ferry_expected_commit_interval_seconds",
			Help: "How often a commit is expected (--expect-commit-every); 0: no expectation. The threshold of the FerryNoRecentCommit alert.",
		}),
		info: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ferry_info",
			Help: "Always 1: the agent's version, destination (no credentials) and multi-node run.",
		}, []string{"version", "destination", "run"}),
		stepsCol: newStepsCollector(),
		last:     -1,
	}
	if reg != nil {
		reg.MustRegister(m.stepsCol)
	}
	// Every stage's series exists from the start, at 0: rate() and alerts
	// see the first error as an increase, not as a new series.
	for _, stage := range ErrorStages {
		m.errors.WithLabelValues(stage)
	}
	m.lastCommitted.Set(-1)
	return m
}

// AddBytes counts n uploaded bytes.
func (m *Metrics) AddBytes(n int64) {
	if m == nil {
		return
	}
	m.uploadBytes.Add(float64(n))
}

// AddParts counts n uploaded parts, for callers that learn them in bulk.
func (m *Metrics) AddParts(n int64) {
	if m == nil || n <= 0 {
		return
	}
	m.uploadParts.Add(float64(n))
}

// Request counts one S3 request attempt of operation op (e.g. "UploadPart").
// Call it for every attempt, retries included; op values must come from a
// small fixed set, as each one is a time series.
func (m *Metrics) Request(op string) {
	if m == nil {
		return
	}
	m.requests.WithLabelValues(op).Inc()
}

// Error counts a failure at stage (e.g. "detect", "upload", "commit"), a
// small fixed set like Request's op.
func (m *Metrics) Error(stage string) {
	if m == nil {
		return
	}
	m.errors.WithLabelValues(stage).Inc()
}

// Committed records that step's manifest was committed sinceComplete after
// the step was found complete on disk, and now as the last commit's time. The last-committed gauge only moves
// forward, so a late commit of an older step does not hide a newer one.
func (m *Metrics) Committed(step int64, sinceComplete time.Duration) {
	if m == nil {
		return
	}
	m.stepsCommitted.Inc()
	m.timeToDurable.Observe(sinceComplete.Seconds())
	m.mu.Lock()
	if step > m.last {
		m.last = step
		m.lastCommitted.Set(float64(step))
	}
	m.mu.Unlock()
	m.SetLastCommitTime(time.Now())
}

// Dedup counts n bytes not uploaded because they were unchanged.
func (m *Metrics) Dedup(n int64) {
	if m == nil {
		return
	}
	m.dedupBytes.Add(float64(n))
}

// Probes answer /healthz and /readyz: 200 "ok" when the probe returns nil
// (or is nil), else 503 with its error on one line, which must therefore
// never hold a secret. Health says the process should not be restarted;
// Ready says it does its job now (the store answers, its loops run).
type Probes struct {
	Health, Ready func() error
}

// MetricsHandler serves /metrics from g, and /healthz and /readyz from p.
func MetricsHandler(g prometheus.Gatherer, p Probes, log *zap.Logger) http.Handler {
	if log == nil {
		log = zap.NewNop()
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{
		ErrorLog:      zap.NewStdLog(log.Named("metrics")),
		ErrorHandling: promhttp.ContinueOnError,
	}))
	mux.HandleFunc("/healthz", probeHandler(p.Health))
	mux.HandleFunc("/readyz", probeHandler(p.Ready))
	return mux
}

func probeHandler(probe func() error) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if probe != nil {
			if err := probe(); err != nil {
				w.WriteHeader(http.StatusServiceUnavailable)
				fmt.Fprintln(w, strings.Join(strings.Fields(err.Error()), " "))
				return
			}
		}
		fmt.Fprintln(w, "ok")
	}
}

// MetricsServer is a metrics endpoint that is bound but not yet serving,
// so that the caller learns the address (a free port when it asked for
// port 0) before the agent starts.
type MetricsServer struct {
	ln  net.Listener
	srv *http.Server
	log *zap.Logger
}

// ListenMetrics binds addr (DefaultMetricsAddr if empty) for MetricsHandler.
// It binds whatever address it is given; keeping it on loopback by default
// is the CLI's job.
func ListenMetrics(addr string, g prometheus.Gatherer, p Probes, log *zap.Logger) (*MetricsServer, error) {
	if log == nil {
		log = zap.NewNop()
	}
	if addr == "" {
		addr = DefaultMetricsAddr
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	srv := &http.Server{
		Handler:           MetricsHandler(g, p, log),
		ReadHeaderTimeout: 10 * time.Second,
		WriteTimeout:      time.Minute,
		ErrorLog:          zap.NewStdLog(log.Named("metrics")),
	}
	return &MetricsServer{ln: ln, srv: srv, log: log}, nil
}

// Addr is the address the server is bound to.
func (m *MetricsServer) Addr() string { return m.ln.Addr().String() }

// Close releases the address of a server that will not Serve.
func (m *MetricsServer) Close() error { return m.ln.Close() }

// Serve serves until ctx is cancelled, then returns nil after shutting
// down; it returns the error if serving fails first. Call it once.
func (m *MetricsServer) Serve(ctx context.Context) error {
	m.log.Info("metrics listening", zap.String("addr", m.Addr()))
	var wg sync.WaitGroup
	errc := make(chan error, 1)
	wg.Go(func() { errc <- m.srv.Serve(m.ln) })
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
		err = fmt.Errorf("metrics on %s: %w", m.Addr(), err)
	}
	shutCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if serr := m.srv.Shutdown(shutCtx); serr != nil && !errors.Is(serr, http.ErrServerClosed) {
		m.srv.Close()
	}
	wg.Wait()
	return err
}

// Lost counts a complete step deleted before it could be uploaded.
func (m *Metrics) Lost() {
	if m == nil {
		return
	}
	m.stepsLost.Inc()
}
