package agent

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/ferrylabs/ferry/agent/control"
)

var _ control.Controller = (*Agent)(nil)

// Status implements control.Controller.
func (a *Agent) Status() control.Status {
	st := control.Status{
		Watch:          a.opts.Detect.Dir,
		Destination:    a.opts.URL,
		Layout:         a.watcher.LayoutName(),
		StateDir:       a.opts.StateDir,
		MetricsAddr:    a.opts.MetricsAddr,
		Started:        a.started.UTC(),
		Draining:       a.draining.Load(),
		LastCommitted:  a.lastCommitted(),
		BytesSent:      a.traffic.sent.Load(),
		BytesSentEarly: a.traffic.sentEarly.Load(),
		Rate:           a.traffic.rate.perSecond(),

		RateWindowSeconds: rateWindow,
		Settling:          a.watcher.Pending(),
	}
	if a.opts.Requests != nil {
		st.Requests = a.opts.Requests()
	}
	a.mu.Lock()
	st.LastError = a.lastErr
	for _, e := range a.steps {
		st.Steps = append(st.Steps, e.status)
	}
	a.mu.Unlock()
	sort.Slice(st.Steps, func(i, j int) bool { return st.Steps[i].Step < st.Steps[j].Step })
	return st
}

// Flush implements control.Controller. It first waits one settle window (plus the
// debounce), so that a checkpoint finished just before the call is found
// complete and counted, then until every step seen is committed or
// abandoned.
func (a *Agent) Flush(ctx context.Context) ([]int64, error) {
	// An agent still starting (listing the bucket, which may be down) has
	// seen nothing yet: "nothing to flush" would be a lie. Wait for it.
	select {
	case <-a.watching:
	case <-ctx.Done():
		return a.unfinished(), fmt.Errorf("%w: %w", control.ErrStarting, ctx.Err())
	}
	grace := a.opts.Detect.Settle
	if grace <= 0 {
		grace = 5 * time.Second
	}
	grace += time.Second
	t := time.NewTimer(grace)
	select {
	case <-ctx.Done():
		t.Stop()
		return a.unfinished(), ctx.Err()
	case <-t.C:
	}
	for {
		a.mu.Lock()
		changed := a.changed
		a.mu.Unlock()
		pending := a.unfinished()
		if len(pending) == 0 {
			return nil, nil
		}
		select {
		case <-ctx.Done():
			return a.unfinished(), ctx.Err()
		case <-changed:
		}
	}
}
