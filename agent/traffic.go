package agent

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/ferrylabs/ferry/agent/control"
	"github.com/ferrylabs/ferry/uploader"
)

// traffic counts the bytes the server acknowledged, for status and the
// metrics. The worker and the pipeline add to it from their goroutines
// without any lock of the agent.
type traffic struct {
	sent      atomic.Int64
	sentEarly atomic.Int64 // of sent, the bytes the pipeline sent
	rate      rateMeter
	metrics   *control.Metrics

	mu      sync.Mutex
	byEarly map[int64]int64 // bytes sent early, by step, until it is complete
}

// takeEarly returns and forgets the bytes sent early of step n.
func (t *traffic) takeEarly(n int64) int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.byEarly[n]
	delete(t.byEarly, n)
	return b
}

// add counts bytes the server acknowledged, pushed or sent early.
func (t *traffic) add(b int64) {
	t.sent.Add(b)
	t.rate.add(b)
	t.metrics.AddBytes(b)
}

// earlyProgress is the pipeline's uploader.Progress: the bytes it sends
// count as sent early.
type earlyProgress struct {
	uploader.NoProgress
	t    *traffic
	step int64
}

// Sent implements uploader.Progress.
func (p earlyProgress) Sent(b int64) {
	p.t.sentEarly.Add(b)
	p.t.add(b)
	p.t.mu.Lock()
	if p.t.byEarly == nil {
		p.t.byEarly = map[int64]int64{}
	}
	p.t.byEarly[p.step] += b
	p.t.mu.Unlock()
}

// pushProgress is the worker's uploader.Progress for one push: the bytes
// sent count in the traffic and in the step's status, those deduplicated
// in the metrics.
type pushProgress struct {
	uploader.NoProgress
	a *Agent
	e *entry
}

// Sent implements uploader.Progress.
func (p pushProgress) Sent(b int64) {
	p.a.traffic.add(b)
	p.a.mu.Lock()
	p.e.status.BytesSent += b
	p.a.mu.Unlock()
}

// Deduplicated implements uploader.Progress.
func (p pushProgress) Deduplicated(b int64) { p.a.opts.Metrics.Dedup(b) }

// rateWindow is the window of the status rate, in seconds.
const rateWindow = 60

// rateMeter measures bytes per second over the last rateWindow seconds.
type rateMeter struct {
	mu      sync.Mutex
	samples [rateWindow]int64 // bytes per second, ring indexed by unix second
	stamp   [rateWindow]int64 // which unix second each slot holds
}

func (r *rateMeter) add(n int64) {
	now := time.Now().Unix()
	r.mu.Lock()
	i := now % rateWindow
	if r.stamp[i] != now {
		r.stamp[i], r.samples[i] = now, 0
	}
	r.samples[i] += n
	r.mu.Unlock()
}

func (r *rateMeter) perSecond() float64 {
	now := time.Now().Unix()
	r.mu.Lock()
	defer r.mu.Unlock()
	var sum int64
	for i := range r.samples {
		if now-r.stamp[i] < rateWindow {
			sum += r.samples[i]
		}
	}
	return float64(sum) / rateWindow
}
