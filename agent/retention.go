package agent

// Local retention (--keep-local): the files of committed steps beyond the
// newest few are deleted, only where the journal proves them durable and
// unchanged since.

import (
	"context"
	"errors"
	"io/fs"
	"path"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/ferrylabs/ferry/agent/control"
	"github.com/ferrylabs/ferry/internal/confine"
	"github.com/ferrylabs/ferry/manifest"
	"github.com/ferrylabs/ferry/uploader"
)

// keepLocal deletes the local files of committed steps beyond the KeepLocal
// newest committed ones, holding out (keeping, not counting) the steps
// declared ahead (retention_hold.go). It deletes only files the journal
// says were made durable and that are still exactly as uploaded (the same
// file: device and inode, size and mtime), and then the step's emptied
// folders. Every deletion goes through the watch dir as an open root and
// follows no link (internal/confine): a committed folder swapped for a
// link to another folder is not followed. Nothing uncommitted is ever touched.
func (a *Agent) keepLocal(ctx context.Context) {
	held := a.heldOut()
	var live, heldSteps []committedEntry
	for _, e := range a.journal.entries() {
		switch {
		case e.Removed:
		case held[e.Step]:
			heldSteps = append(heldSteps, e) // declared ahead: kept, not counted
		default:
			live = append(live, e)
		}
	}
	if len(live) <= a.opts.KeepLocal {
		return
	}
	root, err := confine.Open(a.opts.Detect.Dir)
	if err != nil {
		a.log.Warn("keep-local: cannot open the watch dir", zap.Error(err))
		return
	}
	defer root.Close()
	old := live[:len(live)-a.opts.KeepLocal]
	var drop []committedEntry
	for _, e := range old {
		if e.Pending && !a.stepCommitted(ctx, e.Step) {
			// Only this node's share is durable; the step is not
			// restorable until every node's is. Keep its files.
			continue
		}
		drop = append(drop, e)
	}
	inUse := a.referencedFiles(slices.Concat(heldSteps, live[len(live)-a.opts.KeepLocal:]), old, drop)
	for _, e := range drop {
		removed, kept := 0, 0
		for _, f := range e.Files {
			if inUse[f.Path] {
				kept++ // a kept step (or one in the agent's hands) has it too
				continue
			}
			ok, err := root.RemoveIf(f.Path, func(st confine.Stat) bool { return committedFile(f, st) })
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				a.log.Warn("keep-local: could not delete", zap.String("file", f.Path), zap.Error(err))
			}
			if ok {
				removed++
			}
		}
		if e.Root != "" {
			removeEmptyDirs(root, path.Clean(e.Root))
		}
		if err := a.journal.markRemoved(e.Step); err != nil {
			a.log.Warn("keep-local: could not update the journal", zap.Error(err))
		}
		a.log.Info("keep-local: deleted local files of a committed step", zap.Int64("step", e.Step), zap.Int("files", removed),
			zap.Int("kept_in_use", kept))
	}
}

// referencedFiles is every path a step that stays references: the kept
// newest steps and those held out, old ones not dropped (only this node's
// share durable), and the steps the agent is uploading. A file named by
// one of them is not deleted though an older step also names it: a step
// declared with another's file (`ferry commit` naming step-300/.metadata
// for step 400) must stay restorable from disk as much as from the bucket.
func (a *Agent) referencedFiles(kept, old, drop []committedEntry) map[string]bool {
	in := map[string]bool{}
	add := func(e committedEntry) {
		for _, f := range e.Files {
			in[f.Path] = true
		}
	}
	for _, e := range kept {
		add(e)
	}
	dropped := make(map[int64]bool, len(drop))
	for _, e := range drop {
		dropped[e.Step] = true
	}
	for _, e := range old {
		if !dropped[e.Step] {
			add(e)
		}
	}
	a.mu.Lock()
	for _, e := range a.steps {
		if e.status.State != control.StateCommitted {
			for _, f := range e.step.Files {
				in[f.RelPath] = true
			}
		}
	}
	a.mu.Unlock()
	return in
}

// committedFile reports whether st is the file f the journal recorded as
// committed: regular, same size and mtime, and the same device and inode
// where the journal has them.
func committedFile(f localFile, st confine.Stat) bool {
	return st.IsRegular() && st.Size == f.Size && st.ModTime.UnixNano() == f.ModTime &&
		(f.Ino == 0 || st.Dev == f.Dev && st.Ino == f.Ino)
}

// stepCommitted checks the bucket for a step's manifest (one HEAD), for a
// step that only this node's share of was known to be durable.
func (a *Agent) stepCommitted(ctx context.Context, step int64) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if _, err := a.opts.Store.Head(ctx, manifest.ManifestKey(a.opts.Prefix, step)); err != nil {
		return false
	}
	if err := a.journal.markCommitted(step); err != nil {
		a.log.Warn("keep-local: could not update the journal", zap.Error(err))
	}
	return true
}

// removeEmptyDirs removes rel and its sub-folders beneath root if they
// are empty, deepest first, never going above rel; links are neither
// followed nor removed.
func removeEmptyDirs(root *confine.Dir, rel string) {
	if d, err := root.OpenDir(rel); err == nil {
		des, _ := d.ReadDir(-1)
		d.Close()
		for _, de := range des {
			if de.IsDir() {
				removeEmptyDirs(root, rel+"/"+de.Name())
			}
		}
	}
	_ = root.RemoveEmptyDir(rel) // fails, harmlessly, on a non-empty folder
}

// destination is where this agent's pushes go, for abandoning one.
func (a *Agent) destination() uploader.Destination {
	return uploader.Destination{Store: a.opts.Store, Location: a.opts.URL, Prefix: a.opts.Prefix, StateDir: a.uploadStateDir(), Run: a.opts.Run,
		Nodes: a.opts.Nodes, NodeRank: a.opts.NodeRank, Logger: a.log}
}

// detectedLayout is the layout to record in the manifest: the one the
// watcher uses, "" while auto has not chosen one.
func (a *Agent) detectedLayout() string {
	if name := a.watcher.LayoutName(); name != "auto" {
		return name
	}
	return ""
}
