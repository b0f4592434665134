package restore

import (
	"context"
	"errors"
	"fmt"

	"go.uber.org/zap"

	"github.com/ferrylabs/ferry/internal/remote"
	"github.com/ferrylabs/ferry/internal/verify"
	"github.com/ferrylabs/ferry/manifest"
)

// Every node of a job lands on the same step. A restore of some ranks
// (Options.Ranks, Options.Nodes) downloads only its ranks' files and the
// shared ones, so damage in another node's file is invisible to it: it
// would place the step while the node holding that file falls back to an
// older one. A restore of the latest step therefore also checks, while it
// downloads, that every object of the step it does not read (the other
// ranks' files, and its own files already in place, which it keeps
// without a GET) is in the bucket with its recorded size: a missing or
// truncated object of any node's file fails the step on every node (a
// DamagedError, recorded, and with Fallback an older step). A flipped byte
// only the node that reads the file can see: just before placing the step
// the restore reads the step's damage record once more, and does not place
// a step another node recorded meanwhile. What remains is a node that
// placed the step before the finder recorded it, which the restore
// barrier (barrier.go) rules out when the restore knows the job's nodes
// and run. Without it, the next restore of the job skips the recorded
// step on every node, and the entrypoint's `ferry restore
// --set-aside-newer` moves the step folder it left out of the trainer's
// way.

// crossCheckLimit bounds the LISTs and HEADs of the check in flight.
const crossCheckLimit = 16

// crossCheck is the check of one step, run beside its download.
type crossCheck struct {
	opts Options
	step int64
	done chan struct{}
	err  error // set before done closes
}

// guardLatest starts the check of step m for a restore of the latest step
// (Options.latest; a no-op otherwise) and makes r run it before placing.
// It returns the context the download runs in, cancelled as soon as the
// check finds damage, and a function that the restore's error goes
// through: it waits for the check, and turns the download's cancellation
// into the damage that caused it.
func guardLatest(ctx context.Context, r *restorer, m *manifest.Manifest, p *plan, ranks func(*int) bool) (context.Context, func(error) error) {
	if !r.opts.latest || r.opts.PlanOnly {
		return ctx, func(err error) error { return err }
	}
	cctx, cancel := context.WithCancelCause(ctx)
	c := &crossCheck{opts: r.opts, step: m.Step, done: make(chan struct{})}
	files := unfetched(m, ranks, p, r.opts.Paths)
	go func() {
		defer close(c.done)
		if c.err = c.sizes(cctx, files); c.err != nil {
			cancel(c.err)
		}
	}()
	r.beforeCommit = c.wait
	return cctx, func(err error) error {
		var de *DamagedError
		if err != nil && !errors.As(err, &de) && errors.As(context.Cause(cctx), &de) {
			err = de
		}
		cancel(nil)
		<-c.done
		if r.opts.Barrier == nil && errors.Is(err, ErrHashMismatch) && errors.As(err, &de) && readHereOnly(m, ranks, de.Path) {
			r.log.Warn("the damaged file is one only this node reads: a node that placed the step before this restore recorded it holds it until its next restore, which skips the step; restart the job if its nodes must start from the same step",
				zap.Int64("step", m.Step), zap.String("path", de.Path))
		}
		return err
	}
}

// readHereOnly reports whether the file at path is of a rank the other
// nodes do not restore: the selection leaves out other ranks' files.
func readHereOnly(m *manifest.Manifest, ranks func(*int) bool, path string) bool {
	if ranks == nil {
		return false
	}
	mine, others := false, false
	for _, f := range m.Files {
		switch {
		case f.Rank == nil:
		case !ranks(f.Rank):
			others = true
		case f.Path == path:
			mine = true
		}
	}
	return mine && others
}

// unfetched returns the files of m whose objects the restore will not
// read: those the rank selection leaves out (that the path filter would
// select), and the selected ones already in place with their size, which
// are kept after hashing them on disk. A pack that holds a file the
// restore reads is left out: the read checks it.
func unfetched(m *manifest.Manifest, ranks func(*int) bool, p *plan, paths *PathFilter) []manifest.File {
	read := map[string]bool{}
	var held []manifest.File
	for i := range p.files {
		j := &p.files[i]
		if !j.file.Packed() && p.inPlace(j) {
			held = append(held, j.file)
			continue
		}
		read[j.file.Key] = true
	}
	var out []manifest.File
	for _, f := range m.Files {
		if ranks != nil && f.Rank != nil && !ranks(f.Rank) && (paths == nil || paths.Selects(f.Path)) && !read[f.Key] {
			out = append(out, f)
		}
	}
	for _, f := range held {
		if !read[f.Key] {
			out = append(out, f)
		}
	}
	return out
}

// sizes checks the objects of files; a missing or short one is damage of
// the step.
func (c *crossCheck) sizes(ctx context.Context, files []manifest.File) error {
	if len(files) == 0 {
		return nil
	}
	probs, err := verify.Sizes(ctx, c.opts.Store, c.step, files, min(c.opts.Concurrency, crossCheckLimit))
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("check the objects of step %d that this restore does not download: %w", c.step, err)
	}
	if len(probs) == 0 {
		c.opts.Logger.Debug("every object of the step this restore does not download is there with its size",
			zap.Int64("step", c.step), zap.Int("files", len(files)))
		return nil
	}
	pr := probs[0]
	name := pr.Path
	if name == "" && len(pr.Paths) > 0 {
		name = pr.Paths[0]
	}
	return &DamagedError{Step: c.step, Path: name, Key: pr.Key,
		Err: fmt.Errorf("%s: %s: %s (a file this restore does not download, checked by size before placing so that every node restores the same step)", name, pr.Kind, pr.Detail)}
}

// wait runs before the step is placed: it waits for the size check, then
// reads the step's damage record (one GET). A record written meanwhile,
// by another node that read a file this one did not, fails the step as
// damaged; one that cannot be read is warned about, and the step placed.
// With Options.Barrier it then waits for every node of the job to have
// verified its files of the step (barrier.go).
func (c *crossCheck) wait(ctx context.Context) error {
	select {
	case <-c.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	if c.err != nil {
		return c.err
	}
	d, ok, err := remote.DamageOf(ctx, c.opts.Store, c.opts.Prefix, c.step)
	switch {
	case err != nil && ctx.Err() != nil:
		return ctx.Err()
	case err != nil:
		c.opts.Logger.Warn("could not read the step's damage record before placing it; placing it", zap.Int64("step", c.step), zap.Error(err))
		return nil
	case !ok && c.opts.Barrier != nil:
		return c.barrier(ctx)
	case !ok:
		return nil
	}
	return &DamagedError{Step: c.step, Path: d.Path, Key: d.Key, Recorded: true, Meanwhile: true,
		Err: fmt.Errorf("step %d was recorded damaged in the bucket (%s) while this restore read it, by %s: %s",
			c.step, manifest.DamagedKey(c.opts.Prefix, c.step), recorder(d), d.Reason)}
}

// recorder names who recorded d.
func recorder(d remote.Damage) string {
	if d.By == "" {
		return "another restore"
	}
	return d.By
}
