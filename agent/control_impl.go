package agent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/ferrylabs/ferry/agent/control"
	"github.com/ferrylabs/ferry/agent/detect"
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
		Unrecognized:      a.watcher.Unrecognized(),
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

// Flush implements control.Controller. It first has the watcher look at
// the disk again and waits until the agent has handled what it found, so
// that a checkpoint finished just before the call is counted (complete, or
// settling), then waits until every step seen is committed or abandoned.
func (a *Agent) Flush(ctx context.Context) ([]int64, error) {
	// An agent still starting (listing the bucket, which may be down) has
	// seen nothing yet: "nothing to flush" would be a lie. Wait for it.
	select {
	case <-a.watching:
	case <-ctx.Done():
		return a.unfinished(), fmt.Errorf("%w: %w", control.ErrStarting, ctx.Err())
	}
	if err := a.syncWatcher(ctx); err != nil {
		return a.unfinished(), err
	}
	tick := time.NewTicker(250 * time.Millisecond) // the watcher's pending list has no channel
	defer tick.Stop()
	for {
		a.mu.Lock()
		changed, recording := a.changed, a.recording
		a.mu.Unlock()
		pending := a.unfinished()
		onDisk, stuck := a.waitingOnDisk()
		// recording: a step durable whose journal entry is not
		// written yet.
		if len(pending) == 0 && len(onDisk) == 0 && recording == 0 {
			return a.stuckError(stuck)
		}
		select {
		case <-ctx.Done():
			onDisk, stuck = a.waitingOnDisk()
			return append(a.unfinished(), stuckSteps(stuck)...), &control.WaitingError{Err: ctx.Err(), For: a.waitingFor(onDisk)}
		case <-changed:
		case <-tick.C:
		}
	}
}

// waitingFor says what a flush still waits for, for its timeout's answer:
// the agent's steps not durable yet, then onDisk (waitingOnDisk), up to
// four in all.
func (a *Agent) waitingFor(onDisk []string) string {
	var why []string
	a.mu.Lock()
	for _, n := range slices.Sorted(maps.Keys(a.steps)) {
		st := a.steps[n].status
		switch st.State {
		case control.StatePending, control.StateUploading:
			why = append(why, fmt.Sprintf("step %d %s", n, st.State))
		case control.StateFailed:
			why = append(why, fmt.Sprintf("step %d failed, retrying (%s)", n, st.Error))
		}
	}
	if a.recording > 0 {
		why = append(why, "a durable step's journal entry")
	}
	a.mu.Unlock()
	why = append(why, onDisk...)
	if len(why) > 4 {
		why = append(why[:4], fmt.Sprintf("and %d more", len(why)-4))
	}
	return strings.Join(why, "; ")
}

// syncWatcher returns once the agent has handled every event of a fresh
// evaluation of the disk (detect.Watcher.Sync).
func (a *Agent) syncWatcher(ctx context.Context) error {
	n, err := a.watcher.Sync(ctx)
	if err != nil {
		return err
	}
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for a.handled.Load() < n {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	return nil
}

// waitingOnDisk describes what on disk flush waits for (steps settling or
// still being written, files auto has not placed yet), and returns the
// steps that wait for something that has not come for a settle window: a
// marker, a rank, a fresh marker after a re-save, a torn file made whole.
// The trainer seems to be done with those, and they are not durable.
func (a *Agent) waitingOnDisk() (waiting []string, stuck []detect.Pending) {
	settle := a.opts.Detect.Settle
	if settle <= 0 {
		settle = detect.DefaultSettle
	}
	last := a.lastCommitted()
	for _, p := range a.watcher.Pending() {
		if a.committedAsIs(p) {
			continue // the version on disk is committed (declared, then undeclared)
		}
		switch {
		case p.State == "settling" || time.Since(p.Since) < settle:
			waiting = append(waiting, fmt.Sprintf("%s on disk %s: %s", pendingName(p), p.State, p.Reason))
		case (p.Declared || p.Stale) && (p.Step < 0 || p.Step > last):
			// Declared written and not committable, or vouched for by a
			// marker older than its files (saved again and not vouched
			// for again: a killed re-save, or an order ferry does not
			// know). A save killed before its marker, or with a torn
			// file, is not declared, and an older leftover below a
			// committed step is not what the trainer resumes from.
			stuck = append(stuck, p)
		}
	}
	if a.watcher.Recognizing() {
		waiting = append(waiting, "--layout auto has not placed the files it sees yet")
	}
	return waiting, stuck
}

// pendingName names a step on disk: its number, or its folder for a step
// the layout numbers only when it is reported.
func pendingName(p detect.Pending) string {
	if p.Step < 0 {
		return p.Root
	}
	return fmt.Sprintf("step %d", p.Step)
}

// stuckError is Flush's answer when nothing is left to upload: nil, or
// the steps the trainer seems to have finished that cannot be committed,
// each with its reason, and what auto found when it recognised nothing.
func (a *Agent) stuckError(stuck []detect.Pending) ([]int64, error) {
	var why []string
	for _, p := range stuck {
		w := pendingName(p) + " waits: " + p.Reason
		if p.Hint != "" && p.Hint != "see ferry status" {
			w += " (" + p.Hint + ")"
		}
		why = append(why, w)
	}
	if u := a.watcher.Unrecognized(); u != "" {
		why = append(why, u)
	}
	if len(why) == 0 {
		return nil, nil
	}
	return stuckSteps(stuck), errors.New(strings.Join(why, "; "))
}

func stuckSteps(stuck []detect.Pending) []int64 {
	var out []int64
	for _, p := range stuck {
		out = append(out, p.Step)
	}
	return out
}

var _ control.Committer = (*Agent)(nil)

// committedAsIs reports whether the step the watcher holds pending is, as
// it is on disk, the version this agent committed: the same folder, file
// count, bytes and newest modification time. A step the trainer declared
// and that was committed goes back to its layout's rules once durable, and
// may wait out a long settle window there; flush must not wait for it.
func (a *Agent) committedAsIs(p detect.Pending) bool {
	e, ok := a.journal.get(p.Step)
	if !ok || p.Step < 0 || e.Root != p.Root || len(e.Files) != p.Files {
		return false
	}
	var bytes, newest int64
	for _, f := range e.Files {
		bytes += f.Size
		newest = max(newest, f.ModTime)
	}
	return bytes == p.Bytes && newest == p.Newest.UnixNano()
}
