package agent

import (
	"context"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestWatchdogFedOnlyByLiveLoop: the watchdog is pinged while the agent's
// loop turns, not while it is stuck, and again once it turns again. The
// loop is made stuck as a deadlock would: the agent's lock held while the
// watcher reports a complete step, so that the loop waits in handle and
// the watcher in its send. Before (824cfb6) cmd/ferry's watchdog pinged on
// a ticker whatever the agent did, so a frozen agent was never restarted
// (the test does not compile there: the agent had nothing to ask).
func TestWatchdogFedOnlyByLiveLoop(t *testing.T) {
	m := startMemAgent(t, nil)
	const interval = time.Second // pinged every 500 ms
	var pings atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = m.FeedWatchdog(ctx, interval, func() { pings.Add(1) }) })
	defer wg.Wait()
	defer cancel()

	time.Sleep(5 * interval / 2)
	if n := pings.Load(); n < 3 {
		t.Fatalf("%d pings in %v of a live agent, want at least 3", n, 5*interval/2)
	}
	m.mu.Lock()
	locked := true
	defer func() {
		if locked {
			m.mu.Unlock()
		}
	}()
	writeTestFile(t, filepath.Join(m.watch, "ep0-ba7-rank0.pt"), 64<<10, 7)
	// The step settles (200 ms), the loop blocks on it, and the pings stop
	// once its last turn is older than the window (2 s).
	if !pingsStop(&pings, 2*interval, 15*time.Second) {
		t.Fatalf("the watchdog still pinged 15 s after the agent's loop got stuck")
	}
	if m.Alive(2 * loopTick) {
		t.Fatal("the stuck agent says it is alive")
	}
	m.mu.Unlock()
	locked = false
	m.committed(t, 7, 10*time.Second)
	before := pings.Load()
	time.Sleep(3 * interval / 2)
	if n := pings.Load() - before; n < 2 {
		t.Fatalf("%d pings in %v once the loop turned again, want at least 2", n, 3*interval/2)
	}
	if m.logs.FilterMessageSnippet("not telling the watchdog").Len() != 1 {
		t.Errorf("the stuck agent not logged once:\n%s", m.logText())
	}
}

// pingsStop says whether the count stops moving for quiet within d.
func pingsStop(pings *atomic.Int64, quiet, d time.Duration) bool {
	deadline := time.Now().Add(d)
	last, since := pings.Load(), time.Now()
	for time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		if n := pings.Load(); n != last {
			last, since = n, time.Now()
		} else if time.Since(since) >= quiet {
			return true
		}
	}
	return false
}
