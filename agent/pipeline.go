package agent

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/ferrylabs/ferry/agent/detect"
	"github.com/ferrylabs/ferry/uploader"
)

// earlyRetry is how long the pipeline leaves a step alone after a failed
// early send; the push after the step is complete sends what is missing.
const earlyRetry = 10 * time.Second

// pipeline sends the parts of large files while the trainer writes them
// (Options.Pipeline): the watcher reports steps being written, and for
// each the pipeline runs uploader.Destination.SendEarly, one call per step
// at a time. It uses the link only while the worker is not pushing a
// complete step: when the link falls behind, --when-behind alone decides
// what goes first. Before the worker pushes a step, or the pipeline
// abandons one that vanished, quiesce stops the step's sender and waits
// for it: the step's resume state has one writer at a time.
//
// The pipeline knows nothing of the agent: it gets what it needs when it
// is built (pipelineConfig), and the agent calls it, under Agent.mu for
// the watcher's events. Its own lock is never held across I/O or a call
// out of the pipeline.
type pipeline struct {
	cfg  pipelineConfig
	wake chan struct{}

	mu      sync.Mutex
	growing map[int64]detect.Step // the latest snapshot of each step being written
	fresh   map[int64]bool        // a snapshot no sender has seen yet
	active  map[int64]*earlyRun   // senders in flight
	retryAt map[int64]time.Time
	gone    []int64 // vanished before complete: their early uploads go
	busy    bool    // the worker is pushing a complete step
}

// earlyRun is one SendEarly call in flight.
type earlyRun struct {
	stop atomic.Bool
	done chan struct{}
}

// pipelineConfig is what the pipeline is given when it is built.
type pipelineConfig struct {
	// dest is where the parts go: the agent's destination.
	dest uploader.Destination
	// upload configures the transfers (part size, concurrency, bandwidth).
	upload uploader.Options
	// progress is told of the bytes the server acknowledged, from the
	// senders' goroutines.
	progress uploader.Progress
	log      *zap.Logger
}

func newPipeline(cfg pipelineConfig) *pipeline {
	return &pipeline{cfg: cfg, wake: make(chan struct{}, 1), growing: map[int64]detect.Step{}, fresh: map[int64]bool{},
		active: map[int64]*earlyRun{}, retryAt: map[int64]time.Time{}}
}

// writing records a step's latest snapshot and wakes the pipeline.
func (p *pipeline) writing(s detect.Step) {
	p.mu.Lock()
	p.growing[s.Number], p.fresh[s.Number] = s, true
	p.mu.Unlock()
	p.signal()
}

// vanished drops a step that disappeared before it was complete; its early
// uploads are aborted.
func (p *pipeline) vanished(n int64) {
	p.mu.Lock()
	_, known := p.growing[n]
	delete(p.growing, n)
	delete(p.fresh, n)
	if known {
		p.gone = append(p.gone, n)
	}
	p.mu.Unlock()
	p.signal()
}

// supersededBy drops every step older than n still being written once n
// is committed: a save that stopped halfway (killed, abandoned) will not
// complete under a newer commit, and its early multipart uploads are
// aborted now rather than left in the bucket until prune's abandoned
// window. A step that does complete later is pushed whole.
func (p *pipeline) supersededBy(n int64) {
	p.mu.Lock()
	for k := range p.growing {
		if k < n && p.active[k] == nil {
			delete(p.growing, k)
			delete(p.fresh, k)
			p.gone = append(p.gone, k)
		}
	}
	p.mu.Unlock()
	p.signal()
}

func (p *pipeline) signal() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// setBusy says whether the worker is pushing a complete step. While it is,
// senders stop after their part in flight and none starts.
func (p *pipeline) setBusy(b bool) {
	p.mu.Lock()
	p.busy = b
	if b {
		for _, r := range p.active {
			r.stop.Store(true)
		}
	}
	p.mu.Unlock()
	if !b {
		p.signal()
	}
}

// completed stops sending parts of step n early without waiting: it is
// complete, and the worker's order (--when-behind) decides when it goes.
// The part in flight, if any, ends normally.
func (p *pipeline) completed(n int64) { p.drop(n) }

// quiesce stops sending parts of step n early and waits for the sender in
// flight, if any, to return.
func (p *pipeline) quiesce(n int64) {
	if r := p.drop(n); r != nil {
		<-r.done
	}
}

// drop forgets step n and tells its sender in flight, which it returns
// (nil if none), to stop after its current part.
func (p *pipeline) drop(n int64) *earlyRun {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.growing, n)
	delete(p.fresh, n)
	delete(p.retryAt, n)
	r := p.active[n]
	if r != nil {
		r.stop.Store(true)
	}
	return r
}

// run starts senders until ctx is cancelled, then waits for them.
func (p *pipeline) run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.wake:
		}
		for _, n := range p.takeGone() {
			p.quiesce(n)
			if err := p.cfg.dest.Abandon(ctx, n); err != nil {
				p.cfg.log.Warn("could not abort the parts sent early of a step that vanished", zap.Int64("step", n), zap.Error(err))
			}
		}
		for _, run := range p.startable() {
			wg.Go(func() { p.send(ctx, run.step, run.r) })
		}
	}
}

func (p *pipeline) takeGone() []int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	g := p.gone
	p.gone = nil
	return g
}

// startable registers a sender for each growing step with a snapshot no
// sender has seen, no sender in flight and no failure waiting out its
// retry time, and returns them. Registering under the lock is what lets
// quiesce find every sender of its step.
func (p *pipeline) startable() []startedRun {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.busy {
		return nil
	}
	now := time.Now()
	var out []startedRun
	for n, s := range p.growing {
		if p.fresh[n] && p.active[n] == nil && !now.Before(p.retryAt[n]) {
			r := &earlyRun{done: make(chan struct{})}
			p.active[n], p.fresh[n] = r, false
			out = append(out, startedRun{step: s, r: r})
		}
	}
	return out
}

// startedRun is a sender startable registered.
type startedRun struct {
	step detect.Step
	r    *earlyRun
}

// send runs SendEarly for one snapshot of a step, then wakes the pipeline
// again in case the step grew meanwhile.
func (p *pipeline) send(ctx context.Context, s detect.Step, r *earlyRun) {
	defer func() {
		p.mu.Lock()
		delete(p.active, s.Number)
		if _, growing := p.growing[s.Number]; growing && r.stop.Load() {
			p.fresh[s.Number] = true // paused, not done: go on later
		}
		p.mu.Unlock()
		close(r.done)
		p.signal()
	}()
	progress := p.cfg.progress
	if ep, ok := progress.(earlyProgress); ok {
		ep.step = s.Number // counted in the step's SENT
		progress = ep
	}
	opts := uploader.PushOptions{Upload: p.cfg.upload, Progress: progress}
	es, err := p.cfg.dest.SendEarly(ctx, s, opts, r.stop.Load)
	if es.Parts > 0 {
		p.cfg.log.Debug("sent parts of a step still being written", zap.Int64("step", s.Number), zap.Int64("parts", es.Parts), zap.Int64("bytes", es.Bytes))
	}
	if err != nil && ctx.Err() == nil {
		p.cfg.log.Warn("could not send parts while the step is written; they go once it is complete", zap.Int64("step", s.Number), zap.Error(err))
		p.mu.Lock()
		p.retryAt[s.Number], p.fresh[s.Number] = time.Now().Add(earlyRetry), true
		p.mu.Unlock()
		time.AfterFunc(earlyRetry, p.signal)
	}
}
