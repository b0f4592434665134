package agent

import (
	"testing"

	"github.com/ferrylabs/ferry/agent/control"
)

// TestForgetFinishedSteps: the agent keeps the newest maxFinishedSteps
// finished steps in memory and every step still in progress or with
// upload state to discard, however many steps it saw.
func TestForgetFinishedSteps(t *testing.T) {
	a := &Agent{steps: map[int64]*entry{}}
	const seen = 1000
	for n := int64(1); n <= seen; n++ {
		state := []control.StepState{control.StateCommitted, control.StateAbandoned, control.StateSkipped, control.StateLost}[n%4]
		a.steps[n] = &entry{status: control.StepStatus{Step: n, State: state}}
	}
	a.steps[3].status.State = control.StatePending
	a.steps[5].status.State = control.StateFailed
	a.steps[7].status.State = control.StateNodeDone
	a.steps[9].cleanup = true
	a.steps[11].cancel = func() {}
	a.mu.Lock()
	a.forgetFinishedLocked()
	a.mu.Unlock()
	for _, n := range []int64{3, 5, 7, 9, 11} {
		if a.steps[n] == nil {
			t.Errorf("step %d, unfinished or with work left, was forgotten", n)
		}
	}
	for n := int64(seen - maxFinishedSteps + 1); n <= seen; n++ {
		if a.steps[n] == nil {
			t.Errorf("step %d, among the newest %d finished, was forgotten", n, maxFinishedSteps)
		}
	}
	if len(a.steps) != maxFinishedSteps+5 {
		t.Errorf("%d steps in memory, want %d finished and 5 others", len(a.steps), maxFinishedSteps)
	}
}
