package uploader

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/zeebo/blake3"
	"go.uber.org/zap"

	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/manifest"
)

// PushOptions describe one push of a checkpoint step.
type PushOptions struct {
	Upload Options
	// Location names the destination in the state file (e.g. the s3:// URL),
	// so that state from another destination is never reused.
	Location string
	Prefix   string
	Step     int64
	// Tree is what to push, usually from Scan.
	Tree Tree
	// StateDir holds the resume state; empty disables resuming.
	StateDir string
	// Rank, when set, gives the rank a file belongs to (nil for shared files).
	Rank func(relPath string) *int
	// Blobs are small files held in memory rather than read from disk (a
	// framework's "latest" pointer as it read for this step).
	Blobs []Blob
}

// Blob is a small in-memory file pushed with a step.
type Blob struct {
	RelPath string
	Data    []byte
}

// PushResult reports what a push did.
type PushResult struct {
	Manifest *manifest.Manifest
	// Committed is false when the step was already committed with the
	// same content, and nothing was uploaded.
	Committed bool
	Stats     Stats
}

// Push uploads a checkpoint step and commits its manifest last. A step that
// is already committed with identical content succeeds without uploading; one
// committed with different content fails with manifest.ErrConflict and
// changes nothing. A push that fails or is killed resumes when run again with
// the same arguments and state directory.
func Push(ctx context.Context, opts PushOptions) (PushResult, error) {
	log := opts.Upload.Logger
	if log == nil {
		log = zap.NewNop()
		opts.Upload.Logger = log
	}
	if err := manifest.CheckStep(opts.Step); err != nil {
		return PushResult{}, err
	}
	st := opts.Upload.Store
	prev, err := manifest.Get(ctx, st, opts.Prefix, opts.Step)
	switch {
	case err == nil:
		return pushCommitted(ctx, opts, prev)
	case !errors.Is(err, manifest.ErrNoCheckpoint):
		return PushResult{}, fmt.Errorf("push step %d: check for a committed manifest: %w", opts.Step, err)
	}

	owner := stateOwner(opts.Location, opts.Step)
	var state *State
	if opts.StateDir != "" {
		if state, err = OpenState(statePath(opts.StateDir, owner), owner, NewAttempt); err != nil {
			return PushResult{}, fmt.Errorf("push step %d: %w", opts.Step, err)
		}
		if err := state.Save(); err != nil {
			return PushResult{}, fmt.Errorf("push step %d: %w", opts.Step, err)
		}
	}
	attempt := NewAttempt()
	if state != nil {
		attempt = state.Attempt()
	}
	files := make([]File, len(opts.Tree.Files))
	for i, f := range opts.Tree.Files {
		files[i] = File{LocalPath: f.LocalPath, RelPath: f.RelPath, Key: manifest.DataKey(opts.Prefix, opts.Step, attempt, f.RelPath)}
		if opts.Rank != nil {
			files[i].Rank = opts.Rank(f.RelPath)
		}
	}
	uopts := opts.Upload
	uopts.State = state
	up := New(uopts)
	log.Info("pushing step", zap.Int64("step", opts.Step), zap.Int("files", len(files)), zap.String("attempt", attempt))
	entries, err := up.Upload(ctx, files)
	if err != nil {
		return PushResult{Stats: up.Stats()}, fmt.Errorf("push step %d: %w", opts.Step, err)
	}
	for _, b := range opts.Blobs {
		f, err := putBlob(ctx, st, manifest.DataKey(opts.Prefix, opts.Step, attempt, b.RelPath), b)
		if err != nil {
			return PushResult{Stats: up.Stats()}, fmt.Errorf("push step %d: %w", opts.Step, err)
		}
		entries = append(entries, f)
	}
	m := &manifest.Manifest{
		Format:   manifest.FormatVersion,
		Step:     opts.Step,
		Created:  time.Now().UTC().Truncate(time.Millisecond),
		Files:    entries,
		Symlinks: opts.Tree.Symlinks,
	}
	existing, committed, err := manifest.Commit(ctx, st, opts.Prefix, m)
	if err != nil && !errors.Is(err, manifest.ErrConflict) {
		// Unknown outcome (e.g. the connection broke after the write): keep
		// the state so that a re-run finds the manifest or commits it.
		return PushResult{Stats: up.Stats()}, fmt.Errorf("push step %d: %w", opts.Step, err)
	}
	if !committed {
		// Another push committed this step first; our objects are not
		// referenced by anything, so remove them.
		deleteObjects(ctx, st, entries, log)
	}
	if state != nil {
		if derr := state.Delete(); derr != nil {
			log.Warn("could not remove the upload state file", zap.Error(derr))
		}
	}
	if err != nil {
		return PushResult{Manifest: existing, Stats: up.Stats()}, fmt.Errorf("push step %d: %w", opts.Step, err)
	}
	return PushResult{Manifest: existing, Committed: committed, Stats: up.Stats()}, nil
}

func stateOwner(location string, step int64) string {
	return fmt.Sprintf("%s step %d", location, step)
}

func statePath(dir, owner string) string {
	sum := sha256.Sum256([]byte(owner))
	return filepath.Join(dir, "push-"+hex.EncodeToString(sum[:8])+".json")
}

// Abandon discards an unfinished push of a step: it aborts the multipart
// uploads its state records, deletes the objects it already wrote (nothing
// references them: the step was never committed) and removes the state.
// The agent calls it when the trainer deletes a step before it is durable.
// It must not be called for a step that may still be committed.
func Abandon(ctx context.Context, st store.Store, stateDir, location, prefix string, step int64, log *zap.Logger) error {
	if log == nil {
		log = zap.NewNop()
	}
	owner := stateOwner(location, step)
	path := statePath(stateDir, owner)
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	state, err := OpenState(path, owner, func() string { return "" })
	if err != nil {
		return fmt.Errorf("abandon step %d: %w", step, err)
	}
	var firstErr error
	for key, up := range state.Uploads() {
		if err := st.AbortMultipart(ctx, key, up.UploadID); err != nil && !errors.Is(err, store.ErrNotExist) && firstErr == nil {
			firstErr = fmt.Errorf("abandon step %d: abort upload of %s: %w", step, key, err)
		}
	}
	for key := range state.DoneObjects() {
		if err := st.Delete(ctx, key); err != nil && firstErr == nil {
			firstErr = fmt.Errorf("abandon step %d: delete %s: %w", step, key, err)
		}
	}
	if firstErr != nil {
		return firstErr
	}
	log.Info("abandoned unfinished upload", zap.Int64("step", step), zap.Int("multipart_aborted", len(state.Uploads())), zap.Int("objects_deleted", len(state.DoneObjects())))
	return state.Delete()
}

// pushCommitted handles a push of a step that is already committed: it
// hashes the local files and compares, uploading nothing.
func pushCommitted(ctx context.Context, opts PushOptions, prev *manifest.Manifest) (PushResult, error) {
	local := &manifest.Manifest{Step: opts.Step, Symlinks: opts.Tree.Symlinks}
	for _, b := range opts.Blobs {
		sum := blake3.Sum256(b.Data)
		local.Files = append(local.Files, manifest.File{Path: b.RelPath, Size: int64(len(b.Data)), BLAKE3: hex.EncodeToString(sum[:])})
	}
	var hashed int64
	for _, f := range opts.Tree.Files {
		sum, n, err := HashFile(ctx, f.LocalPath)
		if err != nil {
			return PushResult{}, fmt.Errorf("push step %d: hash %s: %w", opts.Step, f.RelPath, err)
		}
		hashed += n
		local.Files = append(local.Files, manifest.File{Path: f.RelPath, Size: n, BLAKE3: sum})
	}
	stats := Stats{BytesHashed: hashed}
	if !manifest.SameContent(prev, local) {
		return PushResult{Manifest: prev, Stats: stats}, fmt.Errorf("push step %d: %w (compare with `ferry show --step %d`)", opts.Step, manifest.ErrConflict, opts.Step)
	}
	return PushResult{Manifest: prev, Committed: false, Stats: stats}, nil
}

// putBlob writes an in-memory file with one PUT.
func putBlob(ctx context.Context, st store.Store, key string, b Blob) (manifest.File, error) {
	if _, err := st.Put(ctx, key, bytes.NewReader(b.Data), int64(len(b.Data)), store.PutOptions{CRC32C: store.CRC32C(b.Data)}); err != nil {
		return manifest.File{}, fmt.Errorf("upload %s: %w", b.RelPath, err)
	}
	sum := blake3.Sum256(b.Data)
	return manifest.File{Path: b.RelPath, Size: int64(len(b.Data)), BLAKE3: hex.EncodeToString(sum[:]), Key: key}, nil
}

func deleteObjects(ctx context.Context, st store.Store, files []manifest.File, log *zap.Logger) {
	for _, f := range files {
		if err := st.Delete(ctx, f.Key); err != nil {
			log.Warn("could not delete an unreferenced object", zap.String("key", f.Key), zap.Error(err))
		}
	}
}

// HashFile returns the lower-case hex BLAKE3 of a file and its size.
func HashFile(ctx context.Context, path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
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

// NewAttempt returns a fresh random attempt name for object keys.
func NewAttempt() string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err))
	}
	return hex.EncodeToString(b[:])
}
