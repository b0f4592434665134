package follow

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/ferrylabs/ferry/restore"
)

// stagingName is the folder, in Dir, where steps are restored before
// they are renamed into place.
const stagingName = ".ferry-follow.staging"

// StepDir is the folder of step n in dir.
func StepDir(dir string, n int64) string {
	return filepath.Join(dir, strconv.FormatInt(n, 10))
}

// place restores step w.step into the staging folder and renames it into
// DIR/<step>. A damaged step returns what to skip (and nothing placed).
func (f *Follower) place(ctx context.Context, w work) (Placed, *restore.Skipped, error) {
	final := StepDir(f.opts.Dir, w.step)
	e := f.cursor.Steps[w.step]
	ours := e != nil && e.Folder
	if _, err := os.Lstat(final); err == nil && !ours {
		return Placed{}, nil, fmt.Errorf("%s exists and was not placed by ferry follow: move it away to follow step %d", final, w.step)
	}
	staging := filepath.Join(f.opts.Dir, stagingName, strconv.FormatInt(w.step, 10))
	seeded := false
	if ours {
		n, err := seed(final, staging)
		if err != nil {
			return Placed{}, nil, fmt.Errorf("step %d: %w", w.step, err)
		}
		seeded = n > 0
	}
	ropts := f.opts.Restore
	ropts.Store, ropts.Prefix, ropts.Dir, ropts.Step, ropts.Logger = f.opts.Store, f.opts.Prefix, staging, w.step, f.log
	res, err := restore.Restore(ctx, ropts)
	if errors.Is(err, restore.ErrDamaged) && len(res.Skipped) > 0 {
		_ = os.RemoveAll(staging) // nothing of a damaged step is kept
		return Placed{}, &res.Skipped[0], nil
	}
	if err != nil {
		return Placed{}, nil, err
	}
	if seeded {
		if err := dropUnnamed(staging, res); err != nil {
			return Placed{}, nil, fmt.Errorf("step %d: %w", w.step, err)
		}
	}
	// Recorded before the rename: the folder is follow's from now on,
	// whatever happens next.
	f.cursor.Steps[w.step] = &Entry{ETag: w.etag, Revision: res.Manifest.Revision, State: StatePlacing, Folder: true, At: time.Now().UTC()}
	if err := f.cursor.save(f.opts.Dir); err != nil {
		return Placed{}, nil, err
	}
	if err := swap(staging, final); err != nil {
		return Placed{}, nil, fmt.Errorf("step %d: %w", w.step, err)
	}
	return Placed{Step: w.step, Revision: res.Manifest.Revision, Dir: final, Files: res.Files, Bytes: res.Bytes, BytesDownloaded: res.BytesDownloaded}, nil, nil
}

// seed hard-links the regular files of the folder a revision replaces
// into the staging folder, where it has none at their paths: the restore
// verifies them and keeps those that match, downloading only what
// changed. The restore replaces a file by rename, never writing into
// it, so the old folder's files are never changed through the links.
func seed(from, staging string) (int, error) {
	n := 0
	err := filepath.WalkDir(from, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		rel, err := filepath.Rel(from, p)
		if err != nil {
			return err
		}
		to := filepath.Join(staging, rel)
		if _, err := os.Lstat(to); err == nil {
			return nil
		}
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			return err
		}
		if err := os.Link(p, to); err != nil {
			return fmt.Errorf("seed the restore from %s: %w", from, err)
		}
		n++
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) {
		return n, nil
	}
	return n, err
}

// dropUnnamed removes from a seeded staging folder the files and links
// the restored manifest does not name (those of the revision replaced).
func dropUnnamed(staging string, res restore.Result) error {
	named := map[string]bool{}
	for _, fl := range res.Manifest.Files {
		named[filepath.FromSlash(fl.Path)] = true
	}
	for _, l := range res.Manifest.Symlinks {
		named[filepath.FromSlash(l.Path)] = true
	}
	return filepath.WalkDir(staging, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(staging, p)
		if err != nil || named[rel] {
			return err
		}
		return os.Remove(p)
	})
}

// swap renames staging to final. A folder already at final (the revision
// replaced) is exchanged with it atomically where the system can (Linux)
// and moved aside first otherwise, then removed.
func swap(staging, final string) error {
	if _, err := os.Lstat(final); errors.Is(err, fs.ErrNotExist) {
		if err := os.Rename(staging, final); err != nil {
			return fmt.Errorf("place the step: %w", err)
		}
		return nil
	}
	old := staging + ".replaced"
	if err := exchange(staging, final); err == nil {
		if err := os.Rename(staging, old); err != nil {
			return fmt.Errorf("move the replaced revision aside: %w", err)
		}
		return removeReplaced(old)
	}
	if err := os.RemoveAll(old); err != nil {
		return fmt.Errorf("remove %s: %w", old, err)
	}
	if err := os.Rename(final, old); err != nil {
		return fmt.Errorf("move the replaced revision aside: %w", err)
	}
	if err := os.Rename(staging, final); err != nil {
		return fmt.Errorf("place the step: %w", err)
	}
	return removeReplaced(old)
}

func removeReplaced(old string) error {
	if err := os.RemoveAll(old); err != nil {
		return fmt.Errorf("remove the replaced revision: %w", err)
	}
	return nil
}

// keep deletes the step folders follow placed beyond the Keep newest.
func (f *Follower) keep(rep *Report) error {
	folders := f.cursor.folders()
	if f.opts.Keep <= 0 || len(folders) <= f.opts.Keep {
		return nil
	}
	for _, n := range folders[:len(folders)-f.opts.Keep] {
		if err := os.RemoveAll(StepDir(f.opts.Dir, n)); err != nil {
			return fmt.Errorf("--keep: remove step %d: %w", n, err)
		}
		f.cursor.Steps[n].Folder = false
		rep.Removed = append(rep.Removed, n)
		f.log.Info("removed an older step folder (--keep)", zap.Int64("step", n))
	}
	return f.cursor.save(f.opts.Dir)
}
