package agent

// Retention counts what the trainer saved, not what a caller declared
// (issue 47). A caller of the control socket may declare a step made of
// any files it may read (`ferry commit --step N PATH...`), within
// MaxDeclareAhead of the newest step the agent knows. Kept N newest by
// number, such a step would push the trainer's real steps out of
// --keep-remote's and --keep-local's N, and each real step committed
// after it would be pruned right after its commit.
//
// So a step committed by a declaration whose number is above every step
// the layout finds on disk and every step committed before it is "declared
// ahead": retention keeps it, does not count it towards N, and never
// deletes it, until a later step passes its number. A later step passes it
// when the layout finds one on disk or one is committed that is not itself
// declared ahead; a later declared-ahead step passes it only while the
// layout finds no numbered step on disk at all (a trainer declaring every
// save of a layout ferry does not number: there, declarations are the only
// word of the trainer there is). Were any later declaration to pass it, a
// caller declaring two steps, N and N+1, would make N count, and push the
// real steps out as before. The journal records the state (Ahead), so a
// restart keeps it. `ferry prune`, an operator's explicit act, knows
// nothing of it.

import (
	"go.uber.org/zap"

	"github.com/ferrylabs/ferry/agent/control"
)

// declaredAhead reports whether step n, durable now (e its entry), was
// committed by a declaration above every step the layout finds on disk and
// every step committed before it that is not itself held. A revision of a
// step keeps the standing its first commit had, until a later step passes
// it. It runs before the step's journal entry is written, and before its
// declaration is resolved.
func (a *Agent) declaredAhead(e *entry, n int64) bool {
	if e.step.Counted {
		return false // numbered by the agent's counter, not declared
	}
	if prev, ok := a.journal.get(n); ok {
		return prev.Ahead
	}
	if n <= a.watcher.NewestOnDisk() {
		return false
	}
	held := map[int64]bool{}
	for _, c := range a.journal.entries() {
		if c.Ahead {
			held[c.Step] = true
		} else if c.Step > n {
			return false
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.byTrainer[n] == nil {
		return false // found by the layout, then gone from disk
	}
	for m := range a.remote {
		if m > n && !held[m] {
			return false
		}
	}
	for m, s := range a.steps {
		if done := s.status.State == control.StateCommitted || s.status.State == control.StateNodeDone; done && m > n && !held[m] {
			return false
		}
	}
	return true
}

// releasePassed makes the held steps below n count again, n having just
// been committed (ahead: declared ahead itself).
func (a *Agent) releasePassed(n int64, ahead bool) {
	if ahead && a.watcher.NewestOnDisk() >= 0 {
		// The layout numbers the trainer's saves, and n is above them
		// all: a declaration does not pass a declaration here.
		return
	}
	a.release(n, "a later step was committed")
}

// release clears the held steps below n, logging them with why.
func (a *Agent) release(n int64, why string) {
	released, err := a.journal.release(n)
	if err != nil {
		a.log.Warn("retention: could not update the journal", zap.Error(err))
	}
	if len(released) > 0 {
		a.log.Info("retention: steps declared ahead count again: "+why, zap.Int64s("steps", released), zap.Int64("passed_by", n))
	}
}

// heldOut returns the steps retention holds out now: kept, not counted
// towards --keep-remote's or --keep-local's N. Those the layout has
// passed on disk are released first. Each held step is logged once.
func (a *Agent) heldOut() map[int64]bool {
	if newest := a.watcher.NewestOnDisk(); newest >= 0 {
		a.release(newest, "the layout found a later step on disk")
	}
	held := map[int64]bool{}
	for _, e := range a.journal.entries() {
		if e.Ahead {
			held[e.Step] = true
		}
	}
	a.mu.Lock()
	var fresh []int64
	for n := range held {
		if !a.heldLogged[n] {
			a.heldLogged[n] = true
			fresh = append(fresh, n)
		}
	}
	a.mu.Unlock()
	for _, n := range fresh {
		a.log.Info("retention: holding out a step declared ahead of every step saved: kept, and not counted towards --keep-remote or --keep-local, until a later step passes it",
			zap.Int64("step", n))
	}
	return held
}
