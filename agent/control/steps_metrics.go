package control

import (
	"net/url"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Step gauge states: where the steps the agent knows of are, as an
// operator alerts on them. Every state is exported at every scrape (0 when
// empty), so that a rule never meets an absent series.
const (
	// GaugeSettling: on disk, not complete yet (settling, or waiting for
	// a marker, a rank or a temporary file).
	GaugeSettling = "settling"
	// GaugeWaiting: complete on disk, waiting for its upload's turn.
	GaugeWaiting = "waiting"
	// GaugeUploading: being uploaded.
	GaugeUploading = "uploading"
	// GaugeRetrying: an upload attempt failed; it is retried with backoff.
	GaugeRetrying = "retrying"
	// GaugeFailed: failed for good (a conflict, a torn step, an empty
	// step): not retried until it changes on disk; a human must look.
	GaugeFailed = "failed"
	// GaugeNodeDone: multi-node only: this node's share is durable, the
	// whole step is not committed yet.
	GaugeNodeDone = "node-done"
)

// GaugeStates lists the step gauge states in pipeline order.
var GaugeStates = []string{GaugeSettling, GaugeWaiting, GaugeUploading, GaugeRetrying, GaugeFailed, GaugeNodeDone}

// AgentGauges is the agent's state at one scrape.
type AgentGauges struct {
	// Count and Bytes by GaugeStates state.
	Count, Bytes map[string]int64
	// OldestUndurable is when the oldest step complete on disk and not yet
	// durable (waiting, uploading, retrying, failed or node-done) was last
	// written; zero when there is none.
	OldestUndurable time.Time
	// QueueDepth counts the steps waiting for an upload: waiting, and
	// retrying (a failed attempt waiting out its backoff).
	QueueDepth int
	// StoreFailingSince is since when the store's requests have gone
	// unanswered; zero while it answers.
	StoreFailingSince time.Time
}

// Add counts one step of bytes in state.
func (g *AgentGauges) Add(state string, bytes int64) {
	if g.Count == nil {
		g.Count, g.Bytes = map[string]int64{}, map[string]int64{}
	}
	g.Count[state]++
	g.Bytes[state] += bytes
}

// stepsCollector reads the agent's state when Prometheus scrapes, so that
// every gauge is current (a step waiting out a backoff is counted while it
// waits) and ages grow between events.
type stepsCollector struct {
	steps, bytes, queue, oldest, storeFailing *prometheus.Desc

	mu     sync.Mutex
	source func() AgentGauges
	now    func() time.Time
}

func newStepsCollector() *stepsCollector {
	return &stepsCollector{
		steps: prometheus.NewDesc("ferry_steps", "Steps the agent knows of, by state (settling, waiting, uploading, retrying, failed, node-done).",
			[]string{"state"}, nil),
		bytes: prometheus.NewDesc("ferry_step_bytes", "Bytes of the steps in each state of ferry_steps.", []string{"state"}, nil),
		queue: prometheus.NewDesc("ferry_queue_depth", "Steps complete on disk and waiting to be uploaded, those waiting to be retried included.", nil, nil),
		oldest: prometheus.NewDesc("ferry_oldest_undurable_step_age_seconds",
			"Seconds since the oldest step complete on disk and not yet durable was last written; 0 when none.", nil, nil),
		storeFailing: prometheus.NewDesc("ferry_store_failing_seconds",
			"Seconds the store's requests have gone unanswered (refused connections, timeouts, 5xx after retries); 0 while it answers. /readyz fails past --ready-store-timeout.", nil, nil),
		now: time.Now,
	}
}

// Describe implements prometheus.Collector.
func (c *stepsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.steps
	ch <- c.bytes
	ch <- c.queue
	ch <- c.oldest
	ch <- c.storeFailing
}

// Collect implements prometheus.Collector. The source is called without
// c.mu held: it takes the agent's own lock.
func (c *stepsCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	source := c.source
	c.mu.Unlock()
	var g AgentGauges
	if source != nil {
		g = source()
	}
	for _, s := range GaugeStates {
		ch <- prometheus.MustNewConstMetric(c.steps, prometheus.GaugeValue, float64(g.Count[s]), s)
		ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.GaugeValue, float64(g.Bytes[s]), s)
	}
	ch <- prometheus.MustNewConstMetric(c.queue, prometheus.GaugeValue, float64(g.QueueDepth))
	ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, c.since(g.OldestUndurable))
	ch <- prometheus.MustNewConstMetric(c.storeFailing, prometheus.GaugeValue, c.since(g.StoreFailingSince))
}

// since is the seconds from t to now, 0 for a zero t.
func (c *stepsCollector) since(t time.Time) float64 {
	if t.IsZero() {
		return 0
	}
	return max(c.now().Sub(t).Seconds(), 0)
}

// Observe makes the agent's gauges read source at each scrape. source must be
// quick and safe to call from any goroutine; it must not call back into m.
func (m *Metrics) Observe(source func() AgentGauges) {
	if m == nil {
		return
	}
	m.stepsCol.mu.Lock()
	m.stepsCol.source = source
	m.stepsCol.mu.Unlock()
}

// Info describes the agent in ferry_info.
type Info struct {
	Version string
	// Destination is the step's URL (s3://bucket/prefix); any user
	// information in it is dropped, so ferry_info never holds a secret.
	Destination string
	// Run identifies the incarnation of a multi-node job ("" if none).
	Run string
}

// SetInfo sets ferry_info's labels (its value is always 1), replacing what
// an earlier call set.
func (m *Metrics) SetInfo(i Info) {
	if m == nil {
		return
	}
	m.info.Reset()
	m.info.WithLabelValues(i.Version, redactURL(i.Destination), i.Run).Set(1)
}

// SetLastCommitTime sets ferry_last_commit_timestamp_seconds to t if it is
// later than what it holds (the journal's newest commit at start).
func (m *Metrics) SetLastCommitTime(t time.Time) {
	if m == nil || t.IsZero() {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if t.After(m.lastCommitAt) {
		m.lastCommitAt = t
		m.lastCommitTS.Set(float64(t.UnixNano()) / 1e9)
	}
}

// SetExpectedCommitInterval exports how often the operator expects a
// commit (ferry_expected_commit_interval_seconds, 0: no expectation), the
// threshold of deploy/monitoring's FerryNoRecentCommit alert.
func (m *Metrics) SetExpectedCommitInterval(d time.Duration) {
	if m == nil {
		return
	}
	m.expectedEvery.Set(d.Seconds())
}

// redactURL drops user information (a key or a password someone put in
// the URL) and the query from u.
func redactURL(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "(unparsable destination)"
	}
	p.User = nil
	p.RawQuery = ""
	p.Fragment = ""
	return p.String()
}
