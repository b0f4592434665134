package agent

import (
	"context"
	"errors"
	"sort"
	"time"

	"go.uber.org/zap"

	"github.com/ferrylabs/ferry/agent/control"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/manifest"
)

// Learning the commit. On a node of a multi-node job whose part landed
// before the last node's, the push ends with this node's share durable
// ("node-done") and another node merges and commits the step. This node
// learns of the commit by looking for the step's manifest (one HEAD),
// soon and then less often, for the newest node-done steps: until then
// its status, flush, stop log and peer holdings would say nothing of a
// step the bucket holds.

const (
	followMin   = time.Second
	followMax   = 30 * time.Second
	followSteps = 8 // the newest node-done steps followed at once
	followHead  = 10 * time.Second
)

// followState is when a node-done step's manifest is looked for next.
type followState struct {
	next  time.Time
	polls int
}

// followLoop looks for the commits of node-done steps until ctx ends, in a
// goroutine of its own: a HEAD the store stalls holds up no upload.
func (a *Agent) followLoop(ctx context.Context) {
	for ctx.Err() == nil {
		wait := a.followCommits(ctx)
		var t *time.Timer
		var due <-chan time.Time
		if wait >= 0 {
			t = time.NewTimer(wait)
			due = t.C
		}
		select {
		case <-ctx.Done():
		case <-a.followWake:
		case <-due:
		}
		if t != nil {
			t.Stop()
		}
	}
}

// wakeFollower tells followLoop that a step became node-done.
func (a *Agent) wakeFollower() {
	select {
	case a.followWake <- struct{}{}:
	default:
	}
}

// followCommits looks for the manifests of node-done steps that are due
// and returns how long until the next is due (-1: none is followed).
func (a *Agent) followCommits(ctx context.Context) time.Duration {
	for _, n := range a.dueFollows(time.Now()) {
		hctx, cancel := context.WithTimeout(ctx, followHead)
		_, err := a.opts.Store.Head(hctx, manifest.ManifestKey(a.opts.Prefix, n))
		cancel()
		switch {
		case err == nil:
			a.learnCommitted(n)
		case ctx.Err() != nil:
			return -1
		default:
			if !errors.Is(err, store.ErrNotExist) {
				a.log.Debug("could not look for a node-done step's manifest; looking again later", zap.Int64("step", n), zap.Error(err))
			}
			a.followLater(n)
		}
	}
	return a.followWait(time.Now())
}

// dueFollows returns the followed steps due now, after adding the
// journal's node-done steps (those of an earlier run included) and
// dropping all but the newest followSteps.
func (a *Agent) dueFollows(now time.Time) []int64 {
	var pending []int64
	for _, e := range a.journal.entries() {
		if e.Pending {
			pending = append(pending, e.Step)
		}
	}
	sort.Slice(pending, func(i, j int) bool { return pending[i] > pending[j] })
	if len(pending) > followSteps {
		pending = pending[:followSteps]
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	keep := make(map[int64]*followState, len(pending))
	var due []int64
	for _, n := range pending {
		f := a.follows[n]
		if f == nil {
			f = &followState{next: now}
		}
		keep[n] = f
		if !f.next.After(now) {
			due = append(due, n)
		}
	}
	a.follows = keep
	return due
}

func (a *Agent) followLater(n int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if f := a.follows[n]; f != nil {
		f.polls++
		f.next = time.Now().Add(min(followMin<<min(f.polls, 6), followMax))
	}
}

func (a *Agent) followWait(now time.Time) time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	wait := time.Duration(-1)
	for _, f := range a.follows {
		if d := max(f.next.Sub(now), 0); wait < 0 || d < wait {
			wait = d
		}
	}
	return wait
}

// learnCommitted records that another node committed step n: the journal
// (status, flush, peers), the step's state, and the time to durable
// measured to the commit of the whole step.
func (a *Agent) learnCommitted(n int64) {
	if err := a.journal.markCommitted(n); err != nil {
		a.log.Warn("could not record in the journal that another node committed the step", zap.Int64("step", n), zap.Error(err))
		return
	}
	a.mu.Lock()
	delete(a.follows, n)
	e := a.steps[n]
	learned := e != nil && e.status.State == control.StateNodeDone
	var ttd time.Duration
	if learned {
		e.status.State = control.StateCommitted
		ttd = time.Since(e.lastWrite())
	}
	a.changedLocked()
	a.mu.Unlock()
	if !learned {
		return
	}
	a.opts.Metrics.Committed(n, ttd)
	if a.pipe != nil {
		a.pipe.supersededBy(n)
	}
	a.hooks.enqueue(commitEvent{step: n, files: len(e.step.Files) + len(e.step.Generated), bytes: e.step.TotalBytes()})
	a.log.Info("step committed (another node merged it)", zap.Int64("step", n), zap.Duration("time_to_durable", ttd.Round(time.Millisecond)))
}
