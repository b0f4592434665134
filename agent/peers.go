package agent

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/ferrylabs/ferry/internal/confine"
	"github.com/ferrylabs/ferry/internal/heldfile"
	"github.com/ferrylabs/ferry/internal/remote"
	"github.com/ferrylabs/ferry/manifest"
)

// Holdings says which files of committed step the agent can serve to a
// node restoring it (peer.Seed, `ferry agent --serve-peers`): the files of
// the step's committed manifest that this agent committed and that are
// still on disk exactly as they were then (the same regular file, with one
// link: device and inode where the journal has them, size, modification
// time), found beneath the watched directory without following a link
// (manifest paths, like the journal's, are relative to it). It offers
// nothing of a step
// it did not commit, removed (--keep-local), or that is only partly this
// node's (a multi-node step whose manifest it has not seen). The restoring
// node checks every byte against the manifest regardless.
func (a *Agent) Holdings(ctx context.Context, step int64) (string, []heldfile.File, error) {
	e, ok := a.journal.get(step)
	if !ok || e.Removed || e.Pending {
		return "", nil, nil
	}
	m, err := a.served.get(step, e.Committed, func() (*manifest.Manifest, error) {
		return remote.Get(ctx, a.opts.Store, a.opts.Prefix, step)
	})
	if err != nil {
		return "", nil, fmt.Errorf("read the manifest of step %d: %w", step, err)
	}
	local := make(map[string]localFile, len(e.Files))
	for _, f := range e.Files {
		local[filepath.ToSlash(f.Path)] = f
	}
	root, err := confine.Open(a.opts.Detect.Dir)
	if err != nil {
		return "", nil, err
	}
	defer root.Close()
	var held []heldfile.File
	for _, f := range m.Files {
		lf, ok := local[f.Path]
		if !ok || lf.Size != f.Size {
			continue
		}
		st, err := root.Lstat(f.Path)
		if err != nil || !committedFile(lf, st) || st.Nlink > 1 {
			continue
		}
		held = append(held, heldfile.File{File: f, Path: filepath.FromSlash(f.Path), ModTime: lf.ModTime})
	}
	return a.opts.Detect.Dir, held, nil
}

// manifestCache holds the manifests of the few committed steps peers last
// asked about, each with the time of the commit it belongs to: a step
// committed again (a revision) is read again.
type manifestCache struct {
	mu    sync.Mutex
	steps map[int64]cachedManifest
}

type cachedManifest struct {
	committed time.Time
	m         *manifest.Manifest
}

// maxCachedManifests bounds the cache: peers restore the newest steps.
const maxCachedManifests = 8

// get returns step's manifest as committed at committed, from the cache or
// from read (called without the lock held).
func (c *manifestCache) get(step int64, committed time.Time, read func() (*manifest.Manifest, error)) (*manifest.Manifest, error) {
	c.mu.Lock()
	hit, ok := c.steps[step]
	c.mu.Unlock()
	if ok && hit.committed.Equal(committed) {
		return hit.m, nil
	}
	m, err := read()
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.steps == nil {
		c.steps = map[int64]cachedManifest{}
	}
	c.steps[step] = cachedManifest{committed: committed, m: m}
	for len(c.steps) > maxCachedManifests {
		delete(c.steps, slices.Min(slices.Collect(maps.Keys(c.steps))))
	}
	return m, nil
}
