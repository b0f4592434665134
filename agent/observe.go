package agent

import (
	"errors"
	"fmt"
	"time"

	"github.com/ferrylabs/ferry/agent/control"
)

// What an operator watches: the step gauges read at each scrape, and
// readiness (the agent's loops run and the store answers). The store's
// answers are seen through answerStore, which every request of the agent
// goes through.

// DefaultReadyStoreTimeout is how long the store's requests may go
// unanswered before Ready fails.
const DefaultReadyStoreTimeout = 3 * time.Minute

// failedForGood is how far off failForGoodLocked puts a step's next try.
const failedForGood = 50 * 365 * 24 * time.Hour

// stepGauges counts the steps by state for the metrics (control.Observe),
// with the store's failing streak. It takes a.mu briefly and does no I/O.
func (a *Agent) stepGauges() control.AgentGauges {
	var g control.AgentGauges
	g.StoreFailingSince, _ = a.answers.failing()
	for _, p := range a.watcher.Pending() {
		g.Add(control.GaugeSettling, p.Bytes)
	}
	now := time.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, e := range a.steps {
		state := gaugeState(e, now)
		if state == "" {
			continue
		}
		g.Add(state, e.status.Bytes)
		if state == control.GaugeWaiting || state == control.GaugeRetrying {
			g.QueueDepth++
		}
		since := e.lastWrite()
		if since.IsZero() {
			since = e.status.Detected
		}
		if g.OldestUndurable.IsZero() || since.Before(g.OldestUndurable) {
			g.OldestUndurable = since
		}
	}
	return g
}

// gaugeState is the gauge state of a step complete on disk and not yet
// durable, "" for any other (committed, abandoned, skipped, lost).
func gaugeState(e *entry, now time.Time) string {
	switch e.status.State {
	case control.StatePending:
		return control.GaugeWaiting
	case control.StateUploading:
		return control.GaugeUploading
	case control.StateNodeDone:
		return control.GaugeNodeDone
	case control.StateFailed:
		if failedForGoodAt(e, now) {
			return control.GaugeFailed
		}
		return control.GaugeRetrying
	}
	return ""
}

// Ready returns nil when the agent does its job now: it has listed the
// bucket and watches, its loops run, it is not draining, and the store
// answered within ReadyStoreTimeout. The error says why not, on one line.
func (a *Agent) Ready() error {
	select {
	case <-a.watching:
	default:
		return errors.New("starting: listing the committed steps in the bucket")
	}
	switch {
	case !a.running.Load():
		return errors.New("stopped: the agent's loops have ended")
	case a.draining.Load():
		return errors.New("draining: stopping, no new step is taken")
	}
	since, lastErr := a.answers.failing()
	if failing := time.Since(since); !since.IsZero() && failing > a.opts.ReadyStoreTimeout {
		return fmt.Errorf("the store has not answered for %s (--ready-store-timeout %s): last error: %s",
			failing.Round(time.Second), a.opts.ReadyStoreTimeout, lastErr)
	}
	return nil
}
