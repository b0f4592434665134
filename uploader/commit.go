package uploader

import (
	"context"
	"errors"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/ferrylabs/ferry/internal/remote"
	"github.com/ferrylabs/ferry/internal/step"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/manifest"
)

// commitStep commits the uploaded entries: the manifest itself for one
// node, this node's part (and the step, if complete) for several. It
// reports whether the entries' objects ended up referenced.
func commitStep(ctx context.Context, opts pushJob, entries []manifest.File, attemptPrefix string) (PushResult, bool, error) {
	st := opts.Upload.Store
	now := time.Now().UTC().Truncate(time.Millisecond)
	exp := expectations(opts.step.Expect)
	if opts.Nodes <= 1 {
		// One node holds the whole step: what it uploaded must be what the
		// framework recorded, before anything is committed.
		if err := manifest.CheckExpected(opts.Step, entries, exp); err != nil {
			return PushResult{}, false, err
		}
	}
	if opts.revise {
		return reviseStep(ctx, opts, entries, attemptPrefix)
	}
	if opts.Nodes <= 1 {
		m := &manifest.Manifest{
			Format:   manifest.FormatVersion,
			Step:     opts.Step,
			Created:  now,
			Files:    entries,
			Symlinks: opts.links,
			Layout:   opts.Layout,
		}
		existing, committed, err := remote.Commit(ctx, st, opts.Prefix, m)
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
		Symlinks: opts.links,
		Layout:   opts.Layout,
		Expect:   exp,
	}
	nc, err := remote.CommitNodePart(ctx, st, opts.Prefix, part)
	res := completionResult(nc.Completion)
	res.Part = nc.Part
	res.Pending = err == nil && !nc.Done()
	if err == nil {
		logNodeCommit(opts, res)
	}
	// With an error after the part was written, the part references the
	// objects: keep them. A part found in place that names our objects is
	// ours too (the response to our write was lost).
	referenced := nc.PartWritten || (err != nil && nc.Part == nil && !errors.Is(err, remote.ErrPartConflict)) ||
		(nc.Part != nil && referencesAny(nc.Part.Files, entries, attemptPrefix))
	return res, referenced, err
}

// expectations converts the step's record expectations for the manifest.
func expectations(exp []step.Expected) []manifest.Expected {
	if len(exp) == 0 {
		return nil
	}
	out := make([]manifest.Expected, len(exp))
	for i, e := range exp {
		out[i] = manifest.Expected{Path: e.RelPath, Size: e.Size, Record: e.Record}
	}
	return out
}

// reviseStep publishes the entries as the next revision of a step
// committed with other content (PushOptions.Revise).
func reviseStep(ctx context.Context, opts pushJob, entries []manifest.File, attemptPrefix string) (PushResult, bool, error) {
	next := func(cur *manifest.Manifest) (*manifest.Manifest, error) {
		return &manifest.Manifest{Step: opts.Step, Files: entries, Symlinks: opts.links, Layout: opts.Layout}, nil
	}
	m, wrote, err := remote.Revise(ctx, opts.Upload.Store, opts.Prefix, opts.Step, next)
	if err != nil {
		return PushResult{}, false, err
	}
	if wrote {
		opts.Upload.Logger.Warn("published a revision of a committed step: its files changed on disk after an earlier version was committed; restore and list now take this one",
			zap.Int64("step", opts.Step), zap.Int("revision", m.Revision), zap.Int("files", len(m.Files)))
	}
	return PushResult{Manifest: m, Committed: wrote}, wrote || referencesAny(m.Files, entries, attemptPrefix), nil
}

// referencesAny reports whether files name any object this attempt wrote
// (entries under attemptPrefix; reused objects of earlier steps do not
// tell whose write it was).
func referencesAny(files, entries []manifest.File, attemptPrefix string) bool {
	keys := make(map[string]bool, len(entries))
	for _, e := range entries {
		if ownedBy(e.Key, attemptPrefix) {
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

func completionResult(c remote.Completion) PushResult {
	return PushResult{Manifest: c.Manifest, Committed: c.Committed, ByPeer: c.ByPeer, PartsPresent: c.Present, FirstMissing: c.FirstMissing}
}

func logNodeCommit(opts pushJob, res PushResult) {
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

// ownedBy reports whether key is an object of the attempt whose files lie
// under attemptPrefix (manifest.DataKey's, ending in "/"): one of its files
// or one of its packs (manifest.PackKey), beside that folder.
func ownedBy(key, attemptPrefix string) bool {
	return strings.HasPrefix(key, attemptPrefix) || strings.HasPrefix(key, strings.TrimSuffix(attemptPrefix, "/")+manifest.PackSep)
}

// deleteAttempt deletes the objects one push attempt wrote (ownedBy), each
// once, never an earlier step's object an entry references.
func deleteAttempt(ctx context.Context, st store.Store, attemptPrefix string, files []manifest.File, log *zap.Logger) {
	done := map[string]bool{}
	for _, f := range files {
		if !ownedBy(f.Key, attemptPrefix) || done[f.Key] {
			continue
		}
		done[f.Key] = true
		if err := st.Delete(ctx, f.Key); err != nil {
			log.Warn("could not delete an unreferenced object", zap.String("key", f.Key), zap.Error(err))
		}
	}
}
