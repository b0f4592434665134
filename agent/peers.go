package agent

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/ferrylabs/ferry/internal/confine"
	"github.com/ferrylabs/ferry/internal/heldfile"
	"github.com/ferrylabs/ferry/internal/remote"
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
	m, err := remote.Get(ctx, a.opts.Store, a.opts.Prefix, step)
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
