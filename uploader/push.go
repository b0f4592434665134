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
	"strings"
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
	// Nodes is the number of nodes of the job and NodeRank this node's
	// (0..Nodes-1). With more than one node, the push writes this node's
	// part manifest and the step is committed once every node's part is
	// there (manifest.CommitNodePart); 0 or 1 commits the manifest directly.
	Nodes, NodeRank int
	// Run identifies this incarnation of a multi-node job (see
	// manifest.PartSet): parts of different runs never complete a step
	// together. Empty when the job has no run identity.
	Run string
	// NoDedup uploads every file, even one unchanged since the previous
	// committed step.
	NoDedup bool
	// AllowEmpty commits a step (or a node's share) with no files. Without
	// it such a push fails with ErrEmptyStep before any request: an empty
	// step would become the latest one and a restore would hand the
	// trainer nothing, so it starts from scratch.
	AllowEmpty bool
	// Root is the step's own folder within the tree's paths, when the
	// layout gives each step one (detect.Step.Root, e.g. "checkpoint-200").
	// Files are then matched with the previous step's after removing as
	// many leading path elements, so checkpoint-200/tokenizer.json is
	// compared with checkpoint-100/tokenizer.json. A match only selects a
	// candidate: the content is always compared by BLAKE3.
	Root string
}

// Blob is a small in-memory file pushed with a step.
type Blob struct {
	RelPath string
	Data    []byte
}

// PushResult reports what a push did.
type PushResult struct {
	// Manifest is the step's committed manifest; nil when Pending.
	Manifest *manifest.Manifest
	// Committed is true when this push wrote the manifest. It is false when
	// the step was already committed with the same content (nothing was
	// uploaded), and while Pending.
	Committed bool
	// Pending is true when this node's part is durable and the step waits
	// for other nodes' parts: the last node to finish commits it.
	Pending bool
	// ByPeer is true when another node merged the parts and committed the
	// step, this node's part included; Manifest is then nil.
	ByPeer bool
	// Part is this node's part manifest (multi-node pushes only).
	Part *manifest.Part
	// PartsPresent is how many of the step's parts the node found before
	// the first missing one, FirstMissing that node's rank (-1: none).
	PartsPresent, FirstMissing int
	Stats                      Stats
}

// ErrEmptyStep is returned (wrapped) by Push for a step with no files
// unless PushOptions.AllowEmpty is set.
var ErrEmptyStep = errors.New("no files to push")

// Push uploads a checkpoint step and commits its manifest last. A step that
// is already committed with identical content succeeds without uploading; one
// committed with different content fails with manifest.ErrConflict and
// changes nothing. A push that fails or is killed resumes when run again with
// the same arguments and state directory.
//
// Files whose path, size and BLAKE3 equal an entry of the previous committed
// step reference that entry's object instead of being sent (unless NoDedup).
// With Nodes > 1 the push commits this node's part and, if it completes the
// set, the step; a node that re-runs a step whose part it already wrote
// checks its files against it and completes the step if it can.
func Push(ctx context.Context, opts PushOptions) (PushResult, error) {
	log := opts.Upload.Logger
	if log == nil {
		log = zap.NewNop()
		opts.Upload.Logger = log
	}
	if err := manifest.CheckStep(opts.Step); err != nil {
		return PushResult{}, err
	}
	if len(opts.Tree.Files)+len(opts.Blobs) == 0 && !opts.AllowEmpty {
		return PushResult{}, fmt.Errorf("push step %d: %w", opts.Step, ErrEmptyStep)
	}
	opts.Nodes = max(opts.Nodes, 1)
	if opts.Nodes > manifest.MaxNodes || opts.NodeRank < 0 || opts.NodeRank >= opts.Nodes {
		return PushResult{}, fmt.Errorf("push step %d: node rank %d of %d nodes: want 0 <= rank < nodes <= %d", opts.Step, opts.NodeRank, opts.Nodes, manifest.MaxNodes)
	}
	if err := manifest.CheckRun(opts.Run); err != nil {
		return PushResult{}, fmt.Errorf("push step %d: %w", opts.Step, err)
	}
	multi := opts.Nodes > 1
	st := opts.Upload.Store
	done, prevStep, err := findCommitted(ctx, opts)
	switch {
	case err != nil:
		return PushResult{}, err
	case done != nil:
		return pushCommitted(ctx, opts, done)
	}
	if multi {
		part, err := manifest.GetPart(ctx, st, opts.Prefix, partSet(opts), opts.NodeRank)
		switch {
		case err == nil:
			return pushPartWritten(ctx, opts, part)
		case !errors.Is(err, manifest.ErrNoPart):
			return PushResult{}, fmt.Errorf("push step %d: check for this node's part: %w", opts.Step, err)
		}
	}

	owner := stateOwner(opts.Location, opts.Step, opts.Nodes, opts.NodeRank)
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
	var reuse map[string]manifest.File
	if prevStep >= 0 {
		if reuse, err = previousFiles(ctx, opts, prevStep); err != nil {
			return PushResult{}, err
		}
	}
	files := make([]File, len(opts.Tree.Files))
	for i, f := range opts.Tree.Files {
		files[i] = File{LocalPath: f.LocalPath, RelPath: f.RelPath, Key: manifest.DataKey(opts.Prefix, opts.Step, attempt, f.RelPath)}
		if opts.Rank != nil {
			files[i].Rank = opts.Rank(f.RelPath)
		}
		if old, ok := reuse[dedupKey(f.RelPath, opts.Root)]; ok && old.Size == f.Size {
			files[i].Reuse = &old
		}
	}
	uopts := opts.Upload
	uopts.State = state
	up := New(uopts)
	log.Info("pushing step", zap.Int64("step", opts.Step), zap.Int("files", len(files)), zap.String("attempt", attempt),
		zap.Int("node_rank", opts.NodeRank), zap.Int("nodes", opts.Nodes))
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
	res, referenced, err := commitStep(ctx, opts, entries, manifest.DataKey(opts.Prefix, opts.Step, attempt, ""))
	res.Stats = up.Stats()
	if err != nil && !errors.Is(err, manifest.ErrConflict) && !errors.Is(err, manifest.ErrPartConflict) {
		// Unknown outcome (e.g. the connection broke after the write): keep
		// the state so that a re-run finds the manifest or commits it.
		return res, fmt.Errorf("push step %d: %w", opts.Step, err)
	}
	if !referenced {
		// Another push wrote this step (or this node's part) first; the
		// objects of this attempt are not referenced by anything.
		deleteAttempt(ctx, st, manifest.DataKey(opts.Prefix, opts.Step, attempt, ""), entries, log)
	}
	if state != nil {
		if derr := state.Delete(); derr != nil {
			log.Warn("could not remove the upload state file", zap.Error(derr))
		}
	}
	if err != nil {
		return res, fmt.Errorf("push step %d: %w", opts.Step, err)
	}
	return res, nil
}

// commitStep commits the uploaded entries: the manifest itself for one
// node, this node's part (and the step, if complete) for several. It
// reports whether the entries' objects ended up referenced.
func commitStep(ctx context.Context, opts PushOptions, entries []manifest.File, attemptPrefix string) (PushResult, bool, error) {
	st := opts.Upload.Store
	now := time.Now().UTC().Truncate(time.Millisecond)
	if opts.Nodes <= 1 {
		m := &manifest.Manifest{
			Format:   manifest.FormatVersion,
			Step:     opts.Step,
			Created:  now,
			Files:    entries,
			Symlinks: opts.Tree.Symlinks,
		}
		existing, committed, err := manifest.Commit(ctx, st, opts.Prefix, m)
		if !committed && err == nil && referencesAny(existing.Files, entries, attemptPrefix) {
			// Our own write succeeded but its response was lost: the retry
			// found our manifest. It references our objects; keep them.
			committed = true
		}
		return PushResult{Manifest: existing, Committed: committed}, committed, err
	}
	part := &manifest.Part{
		Format:   manifest.FormatVersion,
		Step:     opts.Step,
		NodeRank: opts.NodeRank,
		Nodes:    opts.Nodes,
		Run:      opts.Run,
		Created:  now,
		Files:    entries,
		Symlinks: opts.Tree.Symlinks,
	}
	nc, err := manifest.CommitNodePart(ctx, st, opts.Prefix, part)
	res := completionResult(nc.Completion)
	res.Part = nc.Part
	res.Pending = err == nil && !nc.Done()
	if err == nil {
		logNodeCommit(opts, res)
	}
	// With an error after the part was written, the part references the
	// objects: keep them. A part found in place that names our objects is
	// ours too (the response to our write was lost).
	referenced := nc.PartWritten || (err != nil && nc.Part == nil && !errors.Is(err, manifest.ErrPartConflict)) ||
		(nc.Part != nil && referencesAny(nc.Part.Files, entries, attemptPrefix))
	return res, referenced, err
}

// referencesAny reports whether files name any object this attempt wrote
// (entries under attemptPrefix; reused objects of earlier steps do not
// tell whose write it was).
func referencesAny(files, entries []manifest.File, attemptPrefix string) bool {
	keys := make(map[string]bool, len(entries))
	for _, e := range entries {
		if strings.HasPrefix(e.Key, attemptPrefix) {
			keys[e.Key] = true
		}
	}
	for _, f := range files {
		if keys[f.Key] {
			return true
		}
	}
	return false
}

func completionResult(c manifest.Completion) PushResult {
	return PushResult{Manifest: c.Manifest, Committed: c.Committed, ByPeer: c.ByPeer, PartsPresent: c.Present, FirstMissing: c.FirstMissing}
}

func logNodeCommit(opts PushOptions, res PushResult) {
	log := opts.Upload.Logger
	switch {
	case res.Committed:
		log.Info("all nodes' parts present; committed the step", zap.Int64("step", opts.Step), zap.Int("nodes", opts.Nodes))
	case res.ByPeer:
		log.Info("all nodes' parts present; another node committed the step", zap.Int64("step", opts.Step), zap.Int("nodes", opts.Nodes))
	case res.Pending:
		log.Info("node part durable; the step commits when every node's part is there",
			zap.Int64("step", opts.Step), zap.Int("node_rank", opts.NodeRank), zap.Int("first_missing_node", res.FirstMissing), zap.Int("nodes", opts.Nodes))
	}
}

// findCommitted returns the step's manifest if it is committed, else the
// step to deduplicate against (-1: none). With deduplication one LIST of
// one key answers both; without, a GET of the step's manifest.
func findCommitted(ctx context.Context, opts PushOptions) (*manifest.Manifest, int64, error) {
	st := opts.Upload.Store
	step := opts.Step
	if !opts.NoDedup {
		found, err := manifest.StepAtOrBefore(ctx, st, opts.Prefix, step)
		switch {
		case errors.Is(err, manifest.ErrNoCheckpoint):
			return nil, -1, nil
		case err != nil:
			return nil, -1, fmt.Errorf("push step %d: check for a committed manifest: %w", step, err)
		case found < step:
			return nil, found, nil
		}
	}
	m, err := manifest.Get(ctx, st, opts.Prefix, step)
	switch {
	case err == nil:
		return m, -1, nil
	case errors.Is(err, manifest.ErrNoCheckpoint):
		// Not committed (or, listed a moment ago, pruned since).
		return nil, -1, nil
	}
	return nil, -1, fmt.Errorf("push step %d: check for a committed manifest: %w", step, err)
}

// previousFiles indexes a previous committed step's files by path, for
// deduplication: one GET. A previous manifest that cannot be read only
// disables deduplication.
func previousFiles(ctx context.Context, opts PushOptions, step int64) (map[string]manifest.File, error) {
	st, log := opts.Upload.Store, opts.Upload.Logger
	m, err := manifest.Get(ctx, st, opts.Prefix, step)
	if err == nil {
		out := make(map[string]manifest.File, len(m.Files))
		for _, f := range m.Files {
			if k := dedupKey(f.Path, opts.Root); k != "" {
				if _, dup := out[k]; !dup {
					out[k] = f
				}
			}
		}
		return out, nil
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("push step %d: %w", opts.Step, ctx.Err())
	}
	log.Warn("cannot read the previous step's manifest; uploading every file", zap.Int64("step", opts.Step),
		zap.Int64("previous_step", step), zap.Error(err))
	return nil, nil
}

func partSet(opts PushOptions) manifest.PartSet {
	return manifest.PartSet{Step: opts.Step, Nodes: opts.Nodes, Run: opts.Run}
}

// dedupKey is the path a file is matched on across steps: relPath without
// as many leading elements as root has ("" when it has no more elements).
func dedupKey(relPath, root string) string {
	if root == "" {
		return relPath
	}
	for range strings.Count(strings.Trim(root, "/"), "/") + 1 {
		_, rest, ok := strings.Cut(relPath, "/")
		if !ok {
			return ""
		}
		relPath = rest
	}
	return relPath
}

func stateOwner(location string, step int64, nodes, nodeRank int) string {
	if nodes > 1 {
		return fmt.Sprintf("%s step %d node %d of %d", location, step, nodeRank, nodes)
	}
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
	return AbandonNode(ctx, st, stateDir, location, prefix, step, 1, 0, log)
}

// AbandonNode is Abandon for node nodeRank of an N-node job, whose upload
// state is kept apart from other nodes' sharing the state directory.
func AbandonNode(ctx context.Context, st store.Store, stateDir, location, prefix string, step int64, nodes, nodeRank int, log *zap.Logger) error {
	if log == nil {
		log = zap.NewNop()
	}
	owner := stateOwner(location, step, nodes, nodeRank)
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
// hashes the local files and compares, uploading nothing. A node of a
// multi-node job checks that its files are among the step's.
func pushCommitted(ctx context.Context, opts PushOptions, prev *manifest.Manifest) (PushResult, error) {
	local, stats, err := hashLocal(ctx, opts)
	if err != nil {
		return PushResult{}, err
	}
	same := manifest.SameContent(prev, local)
	if opts.Nodes > 1 {
		same = manifest.Contains(prev, local)
	}
	if !same {
		return PushResult{Manifest: prev, Stats: stats}, fmt.Errorf("push step %d: %w (compare with `ferry show --step %d`)", opts.Step, manifest.ErrConflict, opts.Step)
	}
	return PushResult{Manifest: prev, Committed: false, Stats: stats}, nil
}

// pushPartWritten handles a node re-running a step whose part it already
// wrote (it stopped before the step was committed): it checks its files
// against the part and commits the step if every part is now there.
func pushPartWritten(ctx context.Context, opts PushOptions, part *manifest.Part) (PushResult, error) {
	local, stats, err := hashLocal(ctx, opts)
	if err != nil {
		return PushResult{}, err
	}
	stored := &manifest.Manifest{Step: part.Step, Files: part.Files, Symlinks: part.Symlinks}
	if !manifest.SameContent(stored, local) {
		return PushResult{Part: part, Stats: stats}, fmt.Errorf("push step %d: node %d of %d: %w (its files changed since it pushed them)",
			opts.Step, opts.NodeRank, opts.Nodes, manifest.ErrPartConflict)
	}
	if opts.StateDir != "" {
		// A state file left by a run killed between the part and its
		// removal: every upload it records is complete and referenced.
		_ = os.Remove(statePath(opts.StateDir, stateOwner(opts.Location, opts.Step, opts.Nodes, opts.NodeRank)))
	}
	c, err := manifest.CompleteStep(ctx, opts.Upload.Store, opts.Prefix, partSet(opts), opts.NodeRank)
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
func hashLocal(ctx context.Context, opts PushOptions) (*manifest.Manifest, Stats, error) {
	local := &manifest.Manifest{Step: opts.Step, Symlinks: opts.Tree.Symlinks}
	for _, b := range opts.Blobs {
		sum := blake3.Sum256(b.Data)
		local.Files = append(local.Files, manifest.File{Path: b.RelPath, Size: int64(len(b.Data)), BLAKE3: hex.EncodeToString(sum[:])})
	}
	var hashed int64
	for _, f := range opts.Tree.Files {
		sum, n, err := HashFile(ctx, f.LocalPath)
		if err != nil {
			return nil, Stats{}, fmt.Errorf("push step %d: hash %s: %w", opts.Step, f.RelPath, err)
		}
		hashed += n
		local.Files = append(local.Files, manifest.File{Path: f.RelPath, Size: n, BLAKE3: sum})
	}
	return local, Stats{BytesHashed: hashed}, nil
}

// putBlob writes an in-memory file with one PUT.
func putBlob(ctx context.Context, st store.Store, key string, b Blob) (manifest.File, error) {
	if _, err := st.Put(ctx, key, bytes.NewReader(b.Data), int64(len(b.Data)), store.PutOptions{CRC32C: store.CRC32C(b.Data)}); err != nil {
		return manifest.File{}, fmt.Errorf("upload %s: %w", b.RelPath, err)
	}
	sum := blake3.Sum256(b.Data)
	return manifest.File{Path: b.RelPath, Size: int64(len(b.Data)), BLAKE3: hex.EncodeToString(sum[:]), Key: key}, nil
}

// deleteAttempt deletes the objects one push attempt wrote (keys under
// attemptPrefix), never an earlier step's object an entry references.
func deleteAttempt(ctx context.Context, st store.Store, attemptPrefix string, files []manifest.File, log *zap.Logger) {
	for _, f := range files {
		if !strings.HasPrefix(f.Key, attemptPrefix) {
			continue
		}
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
