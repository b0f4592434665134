package uploader

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/zeebo/blake3"
	"go.uber.org/zap"

	"github.com/ferrylabs/ferry/internal/remote"
	"github.com/ferrylabs/ferry/internal/step"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/manifest"
)

// PushOptions configure one push of a step to a Destination.
type PushOptions struct {
	// Upload configures the transfer (part size, concurrency, bandwidth);
	// its Store and Logger are the destination's.
	Upload Options
	// Progress, when set, is told of the bytes sent, durable and
	// deduplicated as the push goes.
	Progress Progress
	// NoDedup uploads every file, even one unchanged since the previous
	// committed step.
	NoDedup bool
	// AllowEmpty commits a step (or a node's share) with no files. Without
	// it such a push fails with ErrEmptyStep before any request: an empty
	// step would become the latest one and a restore would hand the
	// trainer nothing, so it starts from scratch.
	AllowEmpty bool
	// Layout is the checkpoint layout the caller detected, recorded in the
	// manifest (manifest.Manifest.Layout); "" when unknown.
	Layout string
	// Revise publishes the local files as the step's next revision
	// (remote.Revise) when the step is already committed with other
	// content, instead of failing with remote.ErrConflict: the caller
	// knows the committed version is an earlier state of the same save
	// (the agent, for a step it committed whose files changed since).
	// Unchanged files are deduplicated against the committed version.
	// One-node pushes only: a node of a multi-node job cannot tell its
	// files from the others' in the merged manifest.
	Revise bool
}

// pushJob is one push under way: where it goes, how, and what. Every stage
// (check, send, commit, clean up) takes it.
type pushJob struct {
	Destination
	PushOptions
	// Step is the step's number (step.Step.Number).
	Step  int64
	step  step.Step
	links []manifest.Symlink
	// revise is set once the step was found committed with other content
	// and Revise allows replacing it.
	revise bool
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

// Push uploads step s (its Files, Symlinks and Generated files; s.Number
// is the step) and commits its manifest last. A step that is already
// committed with identical content succeeds without uploading; one
// committed with different content fails with remote.ErrConflict and
// changes nothing. A push that fails or is killed resumes when run again
// with the same arguments and state directory.
//
// Files whose path (below s.Root), size and BLAKE3 equal an entry of the
// previous committed step reference that entry's object instead of being
// sent (unless NoDedup). With Nodes > 1 the push commits this node's part
// and, if it completes the set, the step; a node that re-runs a step whose
// part it already wrote checks its files against it and completes the
// step if it can.
func (d Destination) Push(ctx context.Context, s step.Step, o PushOptions) (PushResult, error) {
	opts := newPush(d, s, o)
	if err := opts.check(); err != nil {
		return PushResult{}, err
	}
	prevStep, res, done, err := earlierPush(ctx, opts)
	if errors.Is(err, remote.ErrConflict) && opts.Revise && opts.Nodes <= 1 {
		// Deduplicated against the committed version it replaces.
		opts.revise, prevStep, done, err = true, opts.Step, false, nil
	}
	if done || err != nil {
		return res, err
	}
	state, attempt, err := openPushState(opts)
	if err != nil {
		return PushResult{}, err
	}
	entries, stats, err := send(ctx, opts, state, attempt, prevStep)
	if err != nil {
		return PushResult{Stats: stats}, fmt.Errorf("push step %d: %w", opts.Step, err)
	}
	if state != nil {
		// The objects sent with one PUT are noted, not saved, as they go:
		// save them once before the commit, so that a commit the store
		// or the validator refuses, retried, sends none of them again.
		if err := state.Save(); err != nil {
			return PushResult{Stats: stats}, fmt.Errorf("push step %d: %w", opts.Step, err)
		}
	}
	res, err = commitAndCleanUp(ctx, opts, state, attempt, entries)
	res.Stats = stats
	return res, err
}

// newPush gathers a push's settings: the upload uses the destination's
// store and logger, and the step's links take the manifest's form.
func newPush(d Destination, s step.Step, o PushOptions) pushJob {
	if d.Logger == nil {
		d.Logger = zap.NewNop()
	}
	o.Upload.Store, o.Upload.Logger = d.Store, d.Logger
	p := pushJob{Destination: d, PushOptions: o, Step: s.Number, step: s}
	for _, l := range s.Symlinks {
		p.links = append(p.links, manifest.Symlink{Path: l.RelPath, Target: l.Target})
	}
	return p
}

// check validates the push.
func (opts *pushJob) check() error {
	if err := manifest.CheckStep(opts.Step); err != nil {
		return err
	}
	if len(opts.step.Files)+len(opts.step.Generated) == 0 && !opts.AllowEmpty {
		return fmt.Errorf("push step %d: %w", opts.Step, ErrEmptyStep)
	}
	opts.Nodes = max(opts.Nodes, 1)
	if opts.Nodes > manifest.MaxNodes || opts.NodeRank < 0 || opts.NodeRank >= opts.Nodes {
		return fmt.Errorf("push step %d: node rank %d of %d nodes: want 0 <= rank < nodes <= %d", opts.Step, opts.NodeRank, opts.Nodes, manifest.MaxNodes)
	}
	if err := manifest.CheckRun(opts.Run); err != nil {
		return fmt.Errorf("push step %d: %w", opts.Step, err)
	}
	return nil
}

// earlierPush handles a step pushed before: committed (compare, upload
// nothing) or, for a node of a multi-node job, with this node's part
// written. Otherwise it returns the step to deduplicate against (-1: none)
// and done=false.
func earlierPush(ctx context.Context, opts pushJob) (prevStep int64, res PushResult, done bool, err error) {
	committed, prevStep, err := findCommitted(ctx, opts)
	switch {
	case err != nil:
		return -1, PushResult{}, true, err
	case committed != nil:
		res, err = pushCommitted(ctx, opts, committed)
		return -1, res, true, err
	case opts.Nodes <= 1:
		return prevStep, PushResult{}, false, nil
	}
	part, err := remote.GetPart(ctx, opts.Upload.Store, opts.Prefix, partSet(opts), opts.NodeRank)
	switch {
	case err == nil:
		res, err = pushPartWritten(ctx, opts, part)
		return -1, res, true, err
	case !errors.Is(err, remote.ErrNoPart):
		return -1, PushResult{}, true, fmt.Errorf("push step %d: check for this node's part: %w", opts.Step, err)
	}
	return prevStep, PushResult{}, false, nil
}

// openPushState opens (or starts) the resume state of this push and
// returns it (nil without a state dir) and the attempt's name.
func openPushState(opts pushJob) (*resumeState, string, error) {
	if opts.StateDir == "" {
		return nil, newAttemptName(), nil
	}
	state, err := loadPushState(opts)
	if err != nil {
		return nil, "", fmt.Errorf("push step %d: %w", opts.Step, err)
	}
	if err := state.Save(); err != nil {
		return nil, "", fmt.Errorf("push step %d: %w", opts.Step, err)
	}
	return state, state.Attempt(), nil
}

// loadPushState reads this push's resume state (or starts one in memory;
// it is written by its first change).
func loadPushState(opts pushJob) (*resumeState, error) {
	owner := stateOwner(opts.Location, opts.Step, opts.Nodes, opts.NodeRank)
	return openResumeState(statePath(opts.StateDir, owner), owner, newAttemptName)
}

// send plans the step's files (object keys of this attempt, ranks, what
// the previous step already holds) and uploads them and the blobs.
func send(ctx context.Context, opts pushJob, state *resumeState, attempt string, prevStep int64) ([]manifest.File, Stats, error) {
	var reuse map[string]manifest.File
	if prevStep >= 0 {
		var err error
		if reuse, err = previousFiles(ctx, opts, prevStep); err != nil {
			return nil, Stats{}, err
		}
	}
	dir, err := openStepDir(opts.step)
	if err != nil {
		return nil, Stats{}, err
	}
	defer closeDir(dir)
	files := make([]File, len(opts.step.Files))
	for i, f := range opts.step.Files {
		files[i] = File{LocalPath: f.LocalPath, RelPath: f.RelPath, Key: manifest.DataKey(opts.Prefix, opts.Step, attempt, f.RelPath), Rank: f.Rank,
			Dir: dir, Seen: &opts.step.Files[i]}
		if old, ok := reuse[dedupKey(f.RelPath, opts.step.Root)]; ok && old.Size == f.Size {
			files[i].Reuse = &old
		}
	}
	uopts := opts.Upload
	uopts.state = state
	if !uopts.NoPack {
		uopts.PackKey = func(name string) string { return manifest.PackKey(opts.Prefix, opts.Step, attempt, name) }
	}
	up := newUploader(uopts, opts.Progress)
	opts.Upload.Logger.Info("pushing step", zap.Int64("step", opts.Step), zap.Int("files", len(files)), zap.String("attempt", attempt),
		zap.Int("node_rank", opts.NodeRank), zap.Int("nodes", opts.Nodes))
	entries, err := up.Upload(ctx, files)
	if err != nil {
		return nil, up.Stats(), err
	}
	for _, b := range opts.step.Generated {
		f, err := putBlob(ctx, opts.Upload.Store, manifest.DataKey(opts.Prefix, opts.Step, attempt, b.RelPath), b)
		if err != nil {
			return nil, up.Stats(), err
		}
		entries = append(entries, f)
	}
	return entries, up.Stats(), nil
}

// commitAndCleanUp commits the uploaded entries and cleans up after the
// attempt: its objects if nothing references them, its state file once
// the outcome is known.
func commitAndCleanUp(ctx context.Context, opts pushJob, state *resumeState, attempt string, entries []manifest.File) (PushResult, error) {
	log := opts.Upload.Logger
	attemptPrefix := manifest.DataKey(opts.Prefix, opts.Step, attempt, "")
	res, referenced, err := commitStep(ctx, opts, entries, attemptPrefix)
	if err != nil && !errors.Is(err, remote.ErrConflict) && !errors.Is(err, remote.ErrPartConflict) {
		// Unknown outcome (e.g. the connection broke after the write): keep
		// the state so that a re-run finds the manifest or commits it.
		return res, fmt.Errorf("push step %d: %w", opts.Step, err)
	}
	if !referenced {
		// Another push wrote this step (or this node's part) first; the
		// objects of this attempt are not referenced by anything.
		deleteAttempt(ctx, opts.Upload.Store, attemptPrefix, entries, log)
	}
	if state != nil {
		abortLeftovers(ctx, opts.Upload.Store, state, log)
		if derr := state.Delete(); derr != nil {
			log.Warn("could not remove the upload state file", zap.Error(derr))
		}
	}
	if err != nil {
		return res, fmt.Errorf("push step %d: %w", opts.Step, err)
	}
	return res, nil
}

// abortLeftovers aborts the multipart uploads the state still records once
// a push is over: uploads begun while a file was written (SendEarly) for a
// file that was then sent in one PUT, deduplicated or left out of the step.
// Every upload a manifest references was completed and is recorded as done
// instead. A failure only leaves parts for the bucket's lifecycle rule.
func abortLeftovers(ctx context.Context, st store.Store, state *resumeState, log *zap.Logger) {
	for key, up := range state.Uploads() {
		abortUnused(ctx, st, key, up.UploadID, log)
	}
}

// abortUnused aborts a multipart upload nothing will complete (one already
// gone counts as aborted). A failure only leaves parts for the bucket's
// lifecycle rule: it is logged, not returned.
func abortUnused(ctx context.Context, st store.Store, key, uploadID string, log *zap.Logger) {
	if err := st.AbortMultipart(ctx, key, uploadID); err != nil && !errors.Is(err, store.ErrNotExist) {
		log.Warn("could not abort an unused multipart upload", zap.String("key", key), zap.Error(err))
	}
}

func partSet(opts pushJob) manifest.PartSet {
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

// putBlob writes an in-memory file with one PUT.
func putBlob(ctx context.Context, st store.Store, key string, b step.Generated) (manifest.File, error) {
	if _, err := st.Put(ctx, key, bytes.NewReader(b.Data), int64(len(b.Data)), store.PutOptions{CRC32C: store.CRC32C(b.Data)}); err != nil {
		return manifest.File{}, fmt.Errorf("upload %s: %w", b.RelPath, err)
	}
	sum := blake3.Sum256(b.Data)
	return manifest.File{Path: b.RelPath, Size: int64(len(b.Data)), BLAKE3: hex.EncodeToString(sum[:]), Key: key}, nil
}

// newAttemptName returns a fresh random attempt name for object keys.
func newAttemptName() string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err))
	}
	return hex.EncodeToString(b[:])
}
