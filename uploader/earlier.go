package uploader

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/zeebo/blake3"
	"go.uber.org/zap"

	"github.com/ferrylabs/ferry/internal/remote"
	"github.com/ferrylabs/ferry/manifest"
)

// findCommitted returns the step's manifest if it is committed, else the
// step to deduplicate against (-1: none). With deduplication one LIST of
// one key answers both; without, a GET of the step's manifest.
func findCommitted(ctx context.Context, opts pushJob) (*manifest.Manifest, int64, error) {
	st := opts.Upload.Store
	step := opts.Step
	if !opts.NoDedup {
		found, err := remote.StepAtOrBefore(ctx, st, opts.Prefix, step)
		switch {
		case errors.Is(err, remote.ErrNoCheckpoint):
			return nil, -1, nil
		case err != nil:
			return nil, -1, fmt.Errorf("push step %d: check for a committed manifest: %w", step, err)
		case found < step:
			return nil, found, nil
		}
	}
	m, err := remote.Get(ctx, st, opts.Prefix, step)
	switch {
	case err == nil:
		return m, -1, nil
	case errors.Is(err, remote.ErrNoCheckpoint):
		// Not committed (or, listed a moment ago, pruned since).
		return nil, -1, nil
	}
	return nil, -1, fmt.Errorf("push step %d: check for a committed manifest: %w", step, err)
}

// previousFiles indexes a previous committed step's files by path, for
// deduplication: one GET. A previous manifest that cannot be read only
// disables deduplication.
func previousFiles(ctx context.Context, opts pushJob, step int64) (map[string]manifest.File, error) {
	st, log := opts.Upload.Store, opts.Upload.Logger
	m, err := remote.Get(ctx, st, opts.Prefix, step)
	if err == nil {
		out := make(map[string]manifest.File, len(m.Files))
		for _, f := range m.Files {
			if k := dedupKey(f.Path, opts.step.Root); k != "" {
				if _, dup := out[k]; !dup {
					out[k] = f
				}
			}
		}
		return out, nil
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("read the previous step's manifest: %w", ctx.Err())
	}
	log.Warn("cannot read the previous step's manifest; uploading every file", zap.Int64("step", opts.Step),
		zap.Int64("previous_step", step), zap.Error(err))
	return nil, nil
}

// pushCommitted handles a push of a step that is already committed: it
// hashes the local files and compares, uploading nothing. A node of a
// multi-node job checks that its files are among the step's.
func pushCommitted(ctx context.Context, opts pushJob, prev *manifest.Manifest) (PushResult, error) {
	local, stats, err := hashLocal(ctx, opts)
	if err != nil {
		return PushResult{}, err
	}
	same := manifest.SameContent(prev, local)
	if opts.Nodes > 1 {
		same = manifest.Contains(prev, local)
	}
	if !same {
		return PushResult{Manifest: prev, Stats: stats}, fmt.Errorf("push step %d: %w (compare with `ferry show --step %d`)", opts.Step, remote.ErrConflict, opts.Step)
	}
	return PushResult{Manifest: prev, Committed: false, Stats: stats}, nil
}

// pushPartWritten handles a node re-running a step whose part it already
// wrote (it stopped before the step was committed): it checks its files
// against the part and commits the step if every part is now there.
func pushPartWritten(ctx context.Context, opts pushJob, part *manifest.Part) (PushResult, error) {
	local, stats, err := hashLocal(ctx, opts)
	if err != nil {
		return PushResult{}, err
	}
	stored := &manifest.Manifest{Step: part.Step, Files: part.Files, Symlinks: part.Symlinks}
	if !manifest.SameContent(stored, local) {
		return PushResult{Part: part, Stats: stats}, fmt.Errorf("push step %d: node %d of %d: %w (its files changed since it pushed them)",
			opts.Step, opts.NodeRank, opts.Nodes, remote.ErrPartConflict)
	}
	if opts.StateDir != "" {
		// A state file left by a run killed between the part and its
		// removal: every upload it records is complete and referenced.
		_ = os.Remove(statePath(opts.StateDir, stateOwner(opts.Location, opts.Step, opts.Nodes, opts.NodeRank)))
	}
	c, err := remote.CompleteStep(ctx, opts.Upload.Store, opts.Prefix, partSet(opts), opts.NodeRank)
	res := completionResult(c)
	res.Part, res.Pending, res.Stats = part, err == nil && !c.Done(), stats
	if err != nil {
		return res, fmt.Errorf("push step %d: %w", opts.Step, err)
	}
	logNodeCommit(opts, res)
	return res, nil
}

// hashLocal describes the local files as a manifest (paths, sizes, hashes,
// symlinks), reading every file once.
func hashLocal(ctx context.Context, opts pushJob) (*manifest.Manifest, Stats, error) {
	local := &manifest.Manifest{Step: opts.Step, Symlinks: opts.links}
	for _, b := range opts.step.Generated {
		sum := blake3.Sum256(b.Data)
		local.Files = append(local.Files, manifest.File{Path: b.RelPath, Size: int64(len(b.Data)), BLAKE3: hex.EncodeToString(sum[:])})
	}
	dir, err := openStepDir(opts.step)
	if err != nil {
		return nil, Stats{}, fmt.Errorf("push step %d: %w", opts.Step, err)
	}
	defer closeDir(dir)
	var hashed int64
	for i, f := range opts.step.Files {
		sum, n, err := hashSource(ctx, File{LocalPath: f.LocalPath, RelPath: f.RelPath, Dir: dir, Seen: &opts.step.Files[i]})
		if err != nil {
			return nil, Stats{}, fmt.Errorf("push step %d: hash %s: %w", opts.Step, f.RelPath, err)
		}
		hashed += n
		local.Files = append(local.Files, manifest.File{Path: f.RelPath, Size: n, BLAKE3: sum})
	}
	return local, Stats{BytesHashed: hashed}, nil
}

// HashFile returns the lower-case hex BLAKE3 of a file and its size.
func HashFile(ctx context.Context, path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	return hashOpen(ctx, f)
}

// hashSource hashes f, opened beneath its directory as an upload opens it.
func hashSource(ctx context.Context, f File) (string, int64, error) {
	fh, _, _, err := f.open()
	if err != nil {
		return "", 0, err
	}
	defer fh.Close()
	return hashOpen(ctx, fh)
}

// hashOpen returns the lower-case hex BLAKE3 of an open file read to its
// end, and the bytes read.
func hashOpen(ctx context.Context, f *os.File) (string, int64, error) {
	h := blake3.New()
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	var n int64
	for {
		if err := ctx.Err(); err != nil {
			return "", 0, err
		}
		r, err := f.Read(*bp)
		h.Write((*bp)[:r])
		n += int64(r)
		if err == io.EOF {
			break
		}
		if err != nil {
			return "", 0, err
		}
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}
