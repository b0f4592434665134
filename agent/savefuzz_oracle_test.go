package agent

import (
	"fmt"
	"maps"
	"strconv"
	"strings"

	"github.com/ferrylabs/ferry/agent/control"
	"github.com/ferrylabs/ferry/manifest"
)

// check is the oracle: it returns what the agent got wrong, "" if nothing.
func (f *fz) check(l fuzzLayout, rec *recordingStore, st control.Status, deleted, gone map[string]bool, left []int64, flushErr error) string {
	var problems []string
	rec.mu.Lock()
	seen := append([]*manifest.Manifest(nil), rec.seen...)
	problems = append(problems, rec.bad...)
	rec.mu.Unlock()
	// The latest version of each step, and each version a completed state.
	latest := map[string]fileState{}
	var newestSingle int64 = -1
	for _, m := range seen {
		key := strconv.FormatInt(m.Step, 10)
		if l.name == "single" {
			key = "single"
		}
		got := manifestState(m, l.generated)
		if !f.wasCompleted(key, got) {
			problems = append(problems, fmt.Sprintf("step %d revision %d committed %v, a state the trainer never completed (its completed states: %v)",
				m.Step, m.Revision, got, f.complete[key]))
		}
		if l.name == "single" {
			if m.Step >= newestSingle {
				newestSingle, latest[key] = m.Step, got
			}
			continue
		}
		latest[key] = got
	}
	// Every step whose last completed state is on disk is committed so.
	for key, states := range f.complete {
		last := states[len(states)-1]
		dir := ""
		if key != "single" {
			n, _ := strconv.ParseInt(key, 10, 64)
			dir = l.dir(n)
		}
		switch {
		case deleted[key]:
			if latest[key] == nil && !reportedLost(st, key) {
				problems = append(problems, fmt.Sprintf("step %s was completed, then deleted from disk, and is neither committed nor reported lost", key))
			}
		case gone[key] || !f.exists(dir) && dir != "":
		case key == "single" && maps.Equal(f.snapshot(dir), last) && !holdsAll(latest[key], last):
			problems = append(problems, fmt.Sprintf("the folder's last completed state %v is on disk, but the latest version holds %v", last, latest[key]))
		case key != "single" && maps.Equal(f.snapshot(dir), last) && !maps.Equal(latest[key], last):
			problems = append(problems, fmt.Sprintf("step %s: its last completed state %v is on disk, but the bucket holds %v", key, last, latest[key]))
		}
	}
	if flushErr != nil || len(left) > 0 {
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
