package follow

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"time"

	"go.uber.org/zap"

	"github.com/ferrylabs/ferry/internal/remote"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/manifest"
	"github.com/ferrylabs/ferry/restore"
)

// DefaultInterval is the time between polls.
const DefaultInterval = 30 * time.Second

// Options say what to follow where.
type Options struct {
	// Store and Prefix locate the run; From is its URL, recorded in the
	// cursor so that a folder follows one run.
	Store  store.Store
	Prefix string
	From   string
	// Dir is the folder the steps are placed in (created if missing).
	Dir string
	// Keep, when > 0, keeps the Keep newest step folders follow placed
	// and deletes the older ones. 0 keeps every one.
	Keep int
	// Since skips the steps before it (0: every committed step).
	Since int64
	// Interval is the time between polls (default DefaultInterval).
	Interval time.Duration
	// Exec, when set, is a shell command run for each step placed
	// (exec.go); ExecStop makes its failure stop follow, which otherwise
	// logs it and goes on.
	Exec     string
	ExecStop bool
	// Stdout and Stderr receive the command's output (default: none).
	Stdout, Stderr io.Writer
	// Restore is the template of each step's restore; Store, Prefix, Dir
	// and Step are set by follow.
	Restore restore.Options
	Logger  *zap.Logger
}

// Placed describes a step follow placed.
type Placed struct {
	Step            int64  `json:"step"`
	Revision        int    `json:"revision"`
	Dir             string `json:"dir"`
	Files           int    `json:"files"`
	Bytes           int64  `json:"bytes"`
	BytesDownloaded int64  `json:"bytes_downloaded"`
	// ExecError is the command's failure, if it failed.
	ExecError string `json:"exec_error,omitempty"`
}

// Report is what a poll did.
type Report struct {
	Placed  []Placed          `json:"placed"`
	Skipped []restore.Skipped `json:"skipped"`
	// Removed are the step folders deleted for Options.Keep.
	Removed []int64 `json:"removed"`
}

// ErrExec is wrapped by the error of a poll stopped by a failed command
// (Options.ExecStop).
var ErrExec = errors.New("--exec command failed")

// Follower follows one run into one folder.
type Follower struct {
	opts   Options
	log    *zap.Logger
	cursor *Cursor
}

// New reads the cursor of opts.Dir (creating the folder). It makes no
// request.
func New(opts Options) (*Follower, error) {
	if opts.Store == nil || opts.Dir == "" {
		return nil, errors.New("follow: Store and Dir are required")
	}
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("follow: create %s: %w", opts.Dir, err)
	}
	c, err := loadCursor(opts.Dir, opts.From)
	if err != nil {
		return nil, fmt.Errorf("follow: %w", err)
	}
	return &Follower{opts: opts, log: opts.Logger, cursor: c}, nil
}

// Run polls until ctx is cancelled, then returns nil: a step in progress
// is abandoned (its verified files stay staged for the next start) and
// the cursor holds what was finished. A failed poll is logged and tried
// again at the next; a failed command with Options.ExecStop ends Run.
func (f *Follower) Run(ctx context.Context) error {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		_, err := f.Poll(ctx)
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, ErrExec):
			return err
		case err != nil:
			f.log.Warn("poll failed; trying again at the next", zap.Duration("in", f.opts.Interval), zap.Error(err))
		}
		t.Reset(f.opts.Interval)
	}
}

// work is a step to handle: new (no record) or changed (another ETag).
type work struct {
	step int64
	etag string
}

// Poll lists the run once and places, in step order, what is new or
// revised. With nothing new it makes that one LIST and nothing else.
func (f *Follower) Poll(ctx context.Context) (Report, error) {
	var rep Report
	todo, err := f.changes(ctx)
	if err != nil {
		return rep, err
	}
	if len(todo) == 0 {
		return rep, f.keep(&rep) // --keep may have changed since the last start
	}
	damaged, err := remote.DamagedSteps(ctx, f.opts.Store, f.opts.Prefix)
	if err != nil {
		f.log.Warn("could not read the bucket's records of damaged steps; following as if there were none", zap.Error(err))
	}
	for _, w := range todo {
		if err := f.handle(ctx, w, damaged, &rep); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// changes lists the run's manifests and returns the steps to handle,
// oldest first.
func (f *Follower) changes(ctx context.Context) ([]work, error) {
	var todo []work
	err := f.opts.Store.List(ctx, manifest.ManifestsPrefix(f.opts.Prefix), "", 0, func(o store.ObjectInfo) error {
		n, ok := manifest.StepFromManifestKey(f.opts.Prefix, o.Key)
		if !ok || n < f.opts.Since {
			return nil
		}
		if e := f.cursor.Steps[n]; e == nil || e.ETag != o.ETag || e.State == StatePlacing {
			todo = append(todo, work{step: n, etag: o.ETag})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list manifests under %s: %w", manifest.ManifestsPrefix(f.opts.Prefix), err)
	}
	sort.Slice(todo, func(i, j int) bool { return todo[i].step < todo[j].step })
	return todo, nil
}

// handle places one step, or skips it, and records what it did.
func (f *Follower) handle(ctx context.Context, w work, damaged map[int64]remote.Damage, rep *Report) error {
	e := f.cursor.Steps[w.step]
	if e != nil && e.State == StateDone {
		fresh, err := f.revised(ctx, w, e)
		if err != nil || !fresh {
			return err
		}
	}
	if d, ok := damaged[w.step]; ok {
		s := restore.Skipped{Step: w.step, Path: d.Path, Key: d.Key, Reason: d.Reason, Record: "recorded before"}
		return f.skip(w, s, rep)
	}
	p, skipped, err := f.place(ctx, w)
	if skipped != nil {
		return f.skip(w, *skipped, rep)
	}
	if err != nil {
		return err
	}
	err = f.runExec(ctx, p)
	switch {
	case ctx.Err() != nil:
		return ctx.Err() // the step stays placing: its command runs again
	case err != nil && f.opts.ExecStop:
		return fmt.Errorf("step %d: %w: %w", p.Step, ErrExec, err)
	case err != nil:
		p.ExecError = err.Error()
		f.log.Warn("--exec command failed; going on with the next step", zap.Int64("step", p.Step), zap.Error(err))
	}
	e = f.cursor.Steps[w.step]
	e.State, e.At = StateDone, time.Now().UTC()
	if err := f.cursor.save(f.opts.Dir); err != nil {
		return err
	}
	rep.Placed = append(rep.Placed, p)
	f.log.Info("step placed", zap.Int64("step", p.Step), zap.Int("revision", p.Revision), zap.String("dir", p.Dir),
		zap.Int("files", p.Files), zap.Int64("bytes_downloaded", p.BytesDownloaded))
	return f.keep(rep)
}

// revised reads the manifest of a step placed before whose ETag changed
// and reports whether it is a newer revision to place. A step whose
// folder is gone (Options.Keep) is not placed again.
func (f *Follower) revised(ctx context.Context, w work, e *Entry) (bool, error) {
	if !e.Folder {
		f.log.Info("a step no longer kept here changed in the bucket; not restoring it", zap.Int64("step", w.step))
		e.ETag = w.etag
		return false, f.cursor.save(f.opts.Dir)
	}
	m, err := remote.Get(ctx, f.opts.Store, f.opts.Prefix, w.step)
	if errors.Is(err, remote.ErrInvalidManifest) {
		return true, nil // the restore finds it damaged and says so
	}
	if err != nil {
		return false, fmt.Errorf("read manifest of step %d: %w", w.step, err)
	}
	if m.Revision > e.Revision {
		f.log.Info("step revised: placing the new revision", zap.Int64("step", w.step), zap.Int("revision", m.Revision), zap.Int("was", e.Revision))
		return true, nil
	}
	e.ETag = w.etag
	return false, f.cursor.save(f.opts.Dir)
}

// skip records a damaged step, never to be tried again unless its
// manifest changes, and says so loudly.
func (f *Follower) skip(w work, s restore.Skipped, rep *Report) error {
	e := f.cursor.Steps[w.step]
	if e == nil {
		e = &Entry{}
		f.cursor.Steps[w.step] = e
	}
	if e.State != StateDone {
		e.State = StateDamaged
	}
	e.ETag, e.Reason, e.At = w.etag, s.Reason, time.Now().UTC()
	rep.Skipped = append(rep.Skipped, s)
	f.log.Warn("step is damaged: skipping it", zap.Int64("step", s.Step), zap.String("path", s.Path), zap.String("key", s.Key),
		zap.String("reason", s.Reason), zap.String("record", s.Record))
	return f.cursor.save(f.opts.Dir)
}
