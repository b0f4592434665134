package agent

import (
	"context"
	"time"

	"go.uber.org/zap"
)

// loopTick is how often Run's loop turns when no event comes, to show it
// is not stuck.
const loopTick = time.Second

// beatLoop records that Run's loop turned.
func (a *Agent) beatLoop() { a.beat.Store(time.Now().UnixNano()) }

// Alive says whether the agent showed life within the last window: Run's
// loop turned (it handles the watcher's events and turns every second
// when there is none) and so did the watching side (the watcher's loop,
// or the retries while the watch dir is unavailable). An agent that is
// starting (listing the bucket) or draining after its stop counts as
// alive: both are bounded by their own timeouts.
func (a *Agent) Alive(window time.Duration) bool {
	n := a.beat.Load()
	if n == 0 || a.draining.Load() {
		return true
	}
	since := time.Now().Add(-window)
	return time.Unix(0, n).After(since) && a.wl.lastLoop().After(since)
}

// FeedWatchdog calls ping every interval/2 while the agent is Alive within
// interval (at least two turns of its loops), until ctx ends, and returns
// nil. A stuck agent (its loop or its watcher not turning) stops the
// pings, so that a service manager with a watchdog (systemd's
// WatchdogSec=interval) restarts it within about two intervals. Pings
// resume if the agent comes back to life.
func (a *Agent) FeedWatchdog(ctx context.Context, interval time.Duration, ping func()) error {
	if interval <= 0 {
		return nil
	}
	t := time.NewTicker(interval / 2)
	defer t.Stop()
	window := max(interval, 2*loopTick)
	starved := false
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		alive := a.Alive(window)
		if alive {
			ping()
		}
		if alive == starved {
			starved = !alive
			if starved {
				a.log.Error("the agent's loop or its watcher has not turned for a watchdog interval: not telling the watchdog it is alive, so that it is restarted",
					zap.Duration("interval", interval))
			} else {
				a.log.Warn("the agent's loops turn again; feeding the watchdog again")
			}
		}
	}
}
