package agent

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/ferrylabs/ferry/agent/detect"
)

// Backoff between attempts to watch a watch dir that cannot be listed. The
// longest wait is short enough that a folder coming back is watched again,
// and the step written next committed, within 10 s.
const (
	watchRetryMin = 250 * time.Millisecond
	watchRetryMax = 4 * time.Second
	// watchRetryWarn is how often the warning is repeated while the watch
	// dir stays unavailable.
	watchRetryWarn = time.Minute
)

// watchLoop runs the watcher, and runs it again when the watch dir itself
// cannot be listed (detect.ErrDirUnavailable: removed, moved away, made
// unreadable, a remount): the agent stays alive, warns while it cannot
// watch, and once the folder is back the watcher's first rescan finds what
// was written meanwhile. Any other watcher error is returned: the agent
// then stops with it rather than go on blind. It returns nil when ctx ends.
type watchLoop struct {
	w   *detect.Watcher
	log *zap.Logger
	dir string
	// failing is set while the watch dir is unavailable; down is closed at
	// the first failure (before the watcher was ever ready), so that Run
	// starts its loop and answers status meanwhile.
	failing atomic.Bool
	down    chan struct{}
	// beat is when the loop last tried (unix nanoseconds) while it waits
	// between attempts: the watcher's own LastLoop covers the rest.
	beat atomic.Int64
	// setErr records the watcher's error for status ("" once it is back).
	setErr func(string)
}

func newWatchLoop(a *Agent) *watchLoop {
	return &watchLoop{w: a.watcher, log: a.log, dir: a.opts.Detect.Dir, down: make(chan struct{}),
		setErr: a.setWatchErr}
}

func (l *watchLoop) run(ctx context.Context, events chan<- detect.Event) error {
	var first time.Time
	var lastWarn time.Time
	tries := 0
	wait := watchRetryMin
	for {
		err := l.w.Run(ctx, events)
		if err == nil || ctx.Err() != nil {
			return nil
		}
		if !errors.Is(err, detect.ErrDirUnavailable) {
			return fmt.Errorf("watch %s: %w", l.dir, err)
		}
		now := time.Now()
		if l.failing.CompareAndSwap(false, true) {
			first, lastWarn, tries, wait = now, now, 0, watchRetryMin
			l.log.Warn("cannot watch the watch dir; retrying until it can be listed", zap.String("dir", l.dir), zap.Error(err))
			l.setErr(fmt.Sprintf("cannot watch %s: %v", l.dir, err))
			closeOnce(l.down)
		} else if now.Sub(lastWarn) >= watchRetryWarn {
			lastWarn = now
			l.log.Warn("still cannot watch the watch dir", zap.String("dir", l.dir), zap.Duration("for", now.Sub(first).Round(time.Second)),
				zap.Int("tries", tries), zap.Error(err))
		}
		tries++
		if !l.sleep(ctx, wait) {
			return nil
		}
		wait = min(2*wait, watchRetryMax)
	}
}

// sleep waits d, showing life every second; false if ctx ended first.
func (l *watchLoop) sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		l.beat.Store(time.Now().UnixNano())
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			l.beat.Store(time.Now().UnixNano())
			return true
		case <-tick.C:
		}
	}
}

// back is called by Run's loop when the watcher is ready again after a
// failure (it sent an event or synced): logs it once.
func (l *watchLoop) back() {
	if l.failing.CompareAndSwap(true, false) {
		l.log.Info("the watch dir can be listed again; watching it again (rescanned)", zap.String("dir", l.dir))
		l.setErr("")
	}
}

// lastLoop is when the watching side last showed life: the watcher's loop,
// or this loop between attempts.
func (l *watchLoop) lastLoop() time.Time {
	t := l.w.LastLoop()
	if n := l.beat.Load(); n != 0 && time.Unix(0, n).After(t) {
		t = time.Unix(0, n)
	}
	return t
}

func closeOnce(c chan struct{}) {
	select {
	case <-c:
	default:
		close(c)
	}
}

// setWatchErr records the watcher's error for status; "" clears it if it
// is still the watcher's.
func (a *Agent) setWatchErr(msg string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if msg != "" {
		a.lastErr, a.watchErr = msg, msg
		return
	}
	if a.lastErr == a.watchErr {
		a.lastErr = ""
	}
	a.watchErr = ""
}
