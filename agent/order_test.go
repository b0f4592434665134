package agent

import (
	"strings"
	"testing"

	"github.com/ferrylabs/ferry/agent/control"
	"github.com/ferrylabs/ferry/agent/detect"
	"github.com/ferrylabs/ferry/internal/store"
)

func orderAgent(t *testing.T, policy string, states map[int64]control.StepState) *Agent {
	t.Helper()
	a, err := New(Options{Store: store.NewMemStore(), Prefix: "run", URL: "s3://b/run", StateDir: t.TempDir(),
		Detect: detect.Options{Dir: t.TempDir()}, WhenBehind: policy})
	if err != nil {
		t.Fatal(err)
	}
	for n, st := range states {
		a.steps[n] = &entry{status: control.StepStatus{Step: n, State: st}}
	}
	return a
}

func TestWhenBehindOrder(t *testing.T) {
	waiting := map[int64]control.StepState{100: control.StatePending, 200: control.StateFailed, 300: control.StatePending, 50: control.StateCommitted}
	for policy, want := range map[string]int64{OldestFirst: 100, NewestFirst: 300, "": 300, SkipSuperseded: 300} {
		a := orderAgent(t, policy, waiting)
		e, _ := a.next()
		if e == nil || e.status.Step != want {
			t.Errorf("%q: next is %v, want step %d", policy, e, want)
		}
	}
	if _, err := New(Options{Store: store.NewMemStore(), StateDir: t.TempDir(), Detect: detect.Options{Dir: t.TempDir()}, WhenBehind: "fastest"}); err == nil ||
		!strings.Contains(err.Error(), "fastest") {
		t.Errorf("unknown policy: %v", err)
	}
}

// TestWhenBehindSkip: older waiting steps are skipped, with the reason,
// once a newer one is complete; a newer step that is failing supersedes
// nothing.
func TestWhenBehindSkip(t *testing.T) {
	a := orderAgent(t, SkipSuperseded, map[int64]control.StepState{100: control.StatePending, 200: control.StateFailed, 300: control.StateUploading})
	if e, _ := a.next(); e != nil {
		t.Fatalf("next is step %d while 300 uploads; want none", e.status.Step)
	}
	for _, n := range []int64{100, 200} {
		st := a.steps[n].status
		if st.State != control.StateSkipped || !strings.Contains(st.Error, "superseded by step 300") {
			t.Errorf("step %d: %s %q", n, st.State, st.Error)
		}
	}
	a = orderAgent(t, SkipSuperseded, map[int64]control.StepState{100: control.StatePending, 300: control.StateFailed})
	if e, _ := a.next(); e == nil || a.steps[100].status.State == control.StateSkipped {
		t.Fatalf("a failing newer step superseded step 100 (next %v)", e)
	}
}
