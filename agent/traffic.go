package agent

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/ferrylabs/ferry/agent/control"
)

// traffic counts the bytes the server acknowledged, for status and the
// metrics. The worker and the pipeline add to it from their goroutines
// without any lock of the agent.
type traffic struct {
	sent      atomic.Int64
	sentEarly atomic.Int64 // of sent, the bytes the pipeline sent
	rate      rateMeter
	metrics   *control.Metrics
	// forward, when set, is told of every byte counted
	// (Options.Upload.OnSent).
	forward func(n int64)
}

// add counts bytes the server acknowledged, pushed or sent early.
func (t *traffic) add(b int64) {
	t.sent.Add(b)
	t.rate.add(b)
	t.metrics.AddBytes(b)
	if t.forward != nil {
		t.forward(b)
	}
}

// addEarly counts bytes the pipeline sent.
func (t *traffic) addEarly(b int64) {
	t.sentEarly.Add(b)
	t.add(b)
}

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
