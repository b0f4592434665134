package agent

import (
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"

	"github.com/ferrylabs/ferry/agent/control"
	"github.com/ferrylabs/ferry/manifest"
)

// check is the oracle: it returns what the agent got wrong, "" if nothing.
// lost is how many steps the agent reported lost.
func (f *fz) check(l fuzzLayout, rec *recordingStore, st control.Status, lost int, left []int64, flushErr error) string {
	var problems []string
	rec.mu.Lock()
	seen := append([]*manifest.Manifest(nil), rec.seen...)
	problems = append(problems, rec.bad...)
	rec.mu.Unlock()
	// The latest version of each step, and each version a completed state.
	latest := map[string]fileState{}
	var newestSingle int64 = -1
	for _, m := range seen {
		key := l.manifestKey(m)
		got := manifestState(m, l.generated)
		if !f.wasCompleted(key, got) {
			problems = append(problems, fmt.Sprintf("step %d (%s) revision %d committed %v, a state the trainer never completed (its completed states: %v)",
				m.Step, key, m.Revision, got, f.complete[key]))
		}
		if l.isSingle() {
			if m.Step >= newestSingle {
				newestSingle, latest[key] = m.Step, got
			}
			continue
		}
		latest[key] = got
	}
	// Every step whose last completed state is on disk is committed so.
	var unnumbered []string
	for key, states := range f.complete {
		last := states[len(states)-1]
		var now fileState
		if key == "single" {
			now = f.snapshot("")
		} else if n, ok := f.numbers[key]; ok {
			now = l.state(f, n)
		} else {
			n, _ := strconv.ParseInt(key, 10, 64)
			now = l.state(f, n)
		}
		switch {
		case f.deleted[key] && latest[key] == nil && l.key != nil:
			unnumbered = append(unnumbered, key) // lost, counted in metrics only
		case f.deleted[key]:
			if latest[key] == nil && !reportedLost(st, key) {
				problems = append(problems, fmt.Sprintf("step %s was completed, then deleted from disk, and is neither committed nor reported lost", key))
			}
		case f.gone[key] || len(now) == 0 || holdsTemp(last):
		case key == "single" && maps.Equal(now, last) && !holdsAll(latest[key], last):
			problems = append(problems, fmt.Sprintf("the folder's last completed state %v is on disk, but the latest version holds %v", last, latest[key]))
		case key != "single" && maps.Equal(now, last) && !maps.Equal(latest[key], last):
			problems = append(problems, fmt.Sprintf("step %s: its last completed state %v is on disk, but the bucket holds %v", key, last, latest[key]))
		}
	}
	if len(unnumbered) > lost {
		problems = append(problems, fmt.Sprintf("steps %v were completed, then deleted from disk, and are not committed; %d reported lost", unnumbered, lost))
	}
	if (flushErr != nil || len(left) > 0) && !f.flushTrue(l, left, flushErr) {
		problems = append(problems, fmt.Sprintf("flush: %v (not committed: %v)", flushErr, left))
	}
	return strings.Join(problems, "\n")
}

// wasCompleted reports whether s is one of the states the trainer
// completed for key.
func (f *fz) wasCompleted(key string, s fileState) bool {
	for _, c := range f.complete[key] {
		if maps.Equal(c, s) {
			return true
		}
	}
	return false
}

// manifestState is a manifest's files as a fileState, without the
// pointers a layout generates.
func manifestState(m *manifest.Manifest, generated map[string]bool) fileState {
	out := fileState{}
	for _, file := range m.Files {
		if !generated[file.Path] {
			out[file.Path] = file.BLAKE3
		}
	}
	return out
}

func reportedLost(st control.Status, key string) bool {
	for _, s := range st.Steps {
		if strconv.FormatInt(s.Step, 10) == key && s.State == control.StateLost {
			return true
		}
	}
	return false
}

// holdsAll reports whether got holds every file of want as want has it: a
// version of the single layout keeps files deleted locally since.
func holdsAll(got, want fileState) bool {
	for p, h := range want {
		if got[p] != h {
			return false
		}
	}
	return true
}

// flushTrue reports whether a flush that failed told the truth: it
// finished waiting (no timeout) and named only steps whose files on disk
// are not a save the trainer completed (a re-save killed after its
// marker: docs/agent.md, flush fails for a quiet step whose marker is
// older than its files). A completed save on disk named as waiting, or a
// flush that ran out of time, is a false answer.
func (f *fz) flushTrue(l fuzzLayout, left []int64, err error) bool {
	var w *control.WaitingError
	if len(left) == 0 || errors.As(err, &w) || l.name == "single" {
		return false
	}
	for _, n := range left {
		states := f.complete[l.stepKey(n)]
		if len(states) > 0 && maps.Equal(l.state(f, n), states[len(states)-1]) {
			return false
		}
	}
	return true
}
