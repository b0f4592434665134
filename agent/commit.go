package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"go.uber.org/zap"

	"github.com/ferrylabs/ferry/agent/control"
	"github.com/ferrylabs/ferry/agent/detect"
	"github.com/ferrylabs/ferry/internal/confine"
)

// The trainer's own word (`ferry commit --step N`, the control socket's
// /commit): step N is complete. The watcher then reports it as soon as its
// files are closed by their writers and held open by none, whatever the
// layout would have guessed (detect.Watcher.Declare), and the call returns
// once the step is durable.

// ErrCommittedOther is Commit's error for a step committed before with
// other files: the trainer declared a second, different step N.
var ErrCommittedOther = errors.New("already committed with other content")

// trainerCommit is a declared step waiting to be durable.
type trainerCommit struct {
	done chan struct{}
	err  error
}

// resolveLocked ends the wait of a declared step n, if any, with err.
func (a *Agent) resolveLocked(n int64, err error) {
	tc := a.byTrainer[n]
	if tc == nil {
		return
	}
	delete(a.byTrainer, n)
	a.watcher.Undeclare(n)
	tc.err = err
	close(tc.done)
}

// Commit declares step n complete, made of paths (relative to the watch
// dir; none: the layout's step n), and with wait blocks until it is durable
// or ctx ends. Errors name what is wrong: no such step on disk, a path
// outside the watch dir, a file still open for writing when ctx ends, a
// step committed before with other content.
func (a *Agent) Commit(ctx context.Context, n int64, paths []string, wait bool) error {
	select {
	case <-a.watching:
	case <-ctx.Done():
		return fmt.Errorf("commit step %d: %w", n, ctx.Err())
	}
	if a.commitWaits.Add(1) > MaxWaitingCommits {
		a.commitWaits.Add(-1)
		return fmt.Errorf("commit step %d: %d commits are waiting already: retry later", n, MaxWaitingCommits)
	}
	defer a.commitWaits.Add(-1)
	if err := a.checkDeclaration(n, paths); err != nil {
		return fmt.Errorf("commit step %d: %w", n, err)
	}
	a.mu.Lock()
	tc := a.byTrainer[n]
	if tc == nil {
		tc = &trainerCommit{done: make(chan struct{})}
		a.byTrainer[n] = tc
	}
	a.mu.Unlock()
	if err := a.watcher.DeclareFor(n, paths, callerSees(ctx)); err != nil {
		a.forget(n)
		return fmt.Errorf("commit step %d: %w", n, err)
	}
	a.log.Info("the trainer declared a step complete", zap.Int64("step", n), zap.Int("paths", len(paths)), zap.Bool("wait", wait))
	if !wait {
		return nil
	}
	if err := a.awaitOnDisk(ctx, n); err != nil {
		a.forget(n)
		return err
	}
	select {
	case <-tc.done:
		if tc.err != nil {
			return fmt.Errorf("commit step %d: %w", n, tc.err)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("commit step %d: not durable yet (%s): %w", n, a.whyWaiting(n), ctx.Err())
	}
}

// awaitOnDisk gives the watcher two looks to find step n on disk: two
// evaluations of the directory made after the declaration (Sync), however
// long a busy node makes them take, not a time guessed from the debounce
// window (on a loaded node a declared step on disk was answered "no step
// on disk").
func (a *Agent) awaitOnDisk(ctx context.Context, n int64) error {
	for look := 0; !a.watcher.HasStep(n); look++ {
		if look == 2 {
			return fmt.Errorf("commit step %d: no step %d on disk in %s (name its files or folder: ferry commit --step %d PATH...)", n, n, a.opts.Detect.Dir, n)
		}
		if _, err := a.watcher.Sync(ctx); err != nil {
			return fmt.Errorf("commit step %d: %w", n, err)
		}
	}
	return nil
}

// forget drops a declaration that failed before it was waited on.
func (a *Agent) forget(n int64) {
	a.mu.Lock()
	a.resolveLocked(n, errors.New("declaration withdrawn"))
	a.mu.Unlock()
}

// whyWaiting says what step n waits for, for a commit that timed out.
func (a *Agent) whyWaiting(n int64) string {
	for _, p := range a.watcher.Pending() {
		if p.Step == n {
			return p.Reason
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if e := a.steps[n]; e != nil {
		if e.status.Error != "" {
			return string(e.status.State) + ": " + e.status.Error
		}
		return string(e.status.State)
	}
	return "not found complete on disk"
}

// callerSees returns what the caller of a control request (ctx) may see
// beneath the watch dir, nil for root, the agent's own user and calls
// from within the agent: they see what the agent sees. Anyone else (a
// user who may read the watch dir) sees a path only through folders it
// may search, and a file only if it may read it (a folder: list and
// search it), as the kernel would let it: a file in another user's 0700
// folder is, to it, no file at all, and declaring it would make the
// agent read and upload what the caller could not.
func callerSees(ctx context.Context) detect.Sees {
	p, ok := control.CallerOf(ctx)
	if !ok || !p.Known || p.UID == 0 || int(p.UID) == os.Geteuid() {
		return nil
	}
	return func(st confine.Stat, o confine.Owner, last bool) bool {
		want := fs.FileMode(0o1) // search, on the way
		switch {
		case !o.Known:
			return false
		case !last && st.Mode&fs.ModeDir == 0:
			return false
		case last && st.Mode&fs.ModeSymlink != 0:
			return true // a link itself has no rights; its folder's were checked
		case last && st.Mode&fs.ModeDir != 0:
			want = 0o5
		case last:
			want = 0o4
		}
		return p.Allows(o.UID, o.GID, o.Perm, want)
	}
}
