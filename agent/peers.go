package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/ferrylabs/ferry/manifest/remote"
	"github.com/ferrylabs/ferry/restore"
)

// Holdings says which files of committed step the agent can serve to a
// node restoring it (peer.Seed, `ferry agent --serve-peers`): the files of
// the step's committed manifest that this agent committed and that are
// still on disk exactly as they were then (a regular file, same size, same
// modification time), below the watched directory (manifest paths, like
// the journal's, are relative to it). It offers nothing of a step
// it did not commit, removed (--keep-local), or that is only partly this
// node's (a multi-node step whose manifest it has not seen). The restoring
// node checks every byte against the manifest regardless.
func (a *Agent) Holdings(ctx context.Context, step int64) (string, []restore.HeldFile, error) {
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
	var held []restore.HeldFile
	for _, f := range m.Files {
		lf, ok := local[f.Path]
		if !ok || lf.Size != f.Size {
			continue
		}
		fi, err := os.Lstat(filepath.Join(a.opts.Detect.Dir, filepath.FromSlash(f.Path)))
		if err != nil || !fi.Mode().IsRegular() || fi.Size() != f.Size || fi.ModTime().UnixNano() != lf.ModTime {
			continue
		}
		held = append(held, restore.HeldFile{File: f, Path: filepath.FromSlash(f.Path), ModTime: lf.ModTime})
	}
	return a.opts.Detect.Dir, held, nil
}
