package agent

import (
	"slices"

	"github.com/ferrylabs/ferry/agent/control"
)

// maxFinishedSteps is how many finished steps (committed, abandoned,
// skipped, lost) the agent keeps in memory, for `ferry status`. Older ones
// are forgotten: without a bound the map of steps grew with every step
// seen, and with it the agent's memory and every pass over it (make soak).
// A forgotten step is decided from the journal and the bucket, as after a
// restart.
const maxFinishedSteps = 64

// forgetFinishedLocked drops the finished steps beyond the newest
// maxFinishedSteps, except those whose upload state is still to be
// discarded or whose upload is still returning.
func (a *Agent) forgetFinishedLocked() {
	var done []int64
	for n, e := range a.steps {
		switch e.status.State {
		case control.StateCommitted, control.StateAbandoned, control.StateSkipped, control.StateLost:
			if !e.cleanup && e.cancel == nil {
				done = append(done, n)
			}
		}
	}
	if len(done) <= maxFinishedSteps {
		return
	}
	slices.Sort(done)
	for _, n := range done[:len(done)-maxFinishedSteps] {
		delete(a.steps, n)
	}
}
