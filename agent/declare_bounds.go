package agent

import (
	"fmt"

	"github.com/ferrylabs/ferry/manifest"
)

// Bounds on the trainer's declarations (`ferry commit`, Commit). A caller
// of the control socket is not the trainer's save: a step number, a list
// of paths and a number of requests it makes up must not cost the agent
// unbounded memory, nor bring retention to count a step nobody saved.
const (
	// MaxDeclareAhead is how far above the newest step the agent knows a
	// declared step may be, unless the layout sees that step on disk:
	// "far" is more than this. The newest known step is the newest the
	// layout finds on disk, committed in the journal or in the bucket
	// when the agent started, or being uploaded. A trainer numbers its
	// saves by iterations; a jump of a million between two saves is a
	// typo, garbage or a caller making a step newer than every real one
	// (which --keep-remote and --keep-local would then keep instead).
	MaxDeclareAhead = 1_000_000
	// MaxDeclarePaths is the most paths one declaration names; name a
	// folder instead of its files.
	MaxDeclarePaths = 10_000
	// MaxOpenDeclarations is the most declared steps waiting to be
	// durable at once.
	MaxOpenDeclarations = 64
	// MaxWaitingCommits is the most Commit calls waiting at once.
	MaxWaitingCommits = 256
)

// checkDeclaration returns why step n made of paths is not taken, in one
// line, or nil.
func (a *Agent) checkDeclaration(n int64, paths []string) error {
	if n < 0 || n > manifest.MaxStep {
		return fmt.Errorf("step %d outside 0..%d: not taken", n, int64(manifest.MaxStep))
	}
	if len(paths) > MaxDeclarePaths {
		return fmt.Errorf("%d paths: at most %d in one declaration (name their folder instead)", len(paths), MaxDeclarePaths)
	}
	if !a.watcher.HasLayoutStep(n) {
		if newest := a.newestKnown(); n > newest+MaxDeclareAhead {
			return fmt.Errorf("step %d is more than %d above the newest step this agent knows (%d): not taken", n, MaxDeclareAhead, newest)
		}
	}
	a.mu.Lock()
	open := len(a.byTrainer)
	_, again := a.byTrainer[n]
	a.mu.Unlock()
	if !again && open >= MaxOpenDeclarations {
		return fmt.Errorf("%d declared steps are not durable yet: at most %d at once; retry once they are", open, MaxOpenDeclarations)
	}
	return nil
}

// newestKnown is the newest step the agent knows the trainer saved: on
// disk by the layout, committed (journal, bucket at start), or in the
// agent's hands; -1 if none.
func (a *Agent) newestKnown() int64 {
	newest := max(a.watcher.NewestOnDisk(), a.lastCommitted())
	a.mu.Lock()
	for n := range a.remote {
		newest = max(newest, n)
	}
	for n := range a.steps {
		newest = max(newest, n)
	}
	a.mu.Unlock()
	return newest
}
