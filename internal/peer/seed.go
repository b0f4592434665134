package peer

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"

	"go.uber.org/zap"

	"github.com/ferrylabs/ferry/internal/confine"
	"github.com/ferrylabs/ferry/internal/heldfile"
)

// heldFile is a file a node serves from its own disk.
type heldFile struct {
	dir *confine.Dir // the folder it is opened beneath, without following links
	rel string
	id  fileID // what was planned: the file opened must still be it
}

// fileID identifies a file on disk: the same device and inode, size and
// modification time.
type fileID struct {
	dev, ino    uint64
	size, mtime int64
}

// checkHeld opens a file to serve below dir and checks it: a regular
// file (no link followed on the way), of the manifest's size, with the
// modification time the caller recorded if it did, and, when alone, with
// no other name (a hard link's other name may be outside the folder). It
// returns the file, open, and its identity.
func checkHeld(dir *confine.Dir, f heldfile.File, alone bool) (*os.File, fileID, error) {
	fh, err := dir.OpenFile(filepath.ToSlash(f.Path))
	if err != nil {
		return nil, fileID{}, err
	}
	id, links, err := identify(fh)
	switch {
	case err != nil:
	case id.size != f.File.Size:
		err = fmt.Errorf("%s: %d bytes, the manifest says %d", f.Path, id.size, f.File.Size)
	case f.ModTime != 0 && id.mtime != f.ModTime:
		err = fmt.Errorf("%s: modified since it was committed", f.Path)
	case alone && links > 1:
		err = fmt.Errorf("%s: has %d names (a hard link)", f.Path, links)
	}
	if err != nil {
		fh.Close()
		return nil, fileID{}, err
	}
	return fh, id, nil
}

// heldFiles checks files (below dir) and returns those it may serve, by
// object key, and as plan objects, each key once. Packed files are left
// out: their key names a pack of several files, which no one file on disk
// is (restore reads packs from the bucket).
func (n *Node) heldFiles(dir *confine.Dir, files []heldfile.File, alone bool) (map[string]heldFile, []object) {
	held := map[string]heldFile{}
	var out []object
	for _, f := range files {
		if _, ok := held[f.File.Key]; ok || f.File.Packed() {
			continue
		}
		fh, id, err := checkHeld(dir, f, alone)
		if err != nil {
			n.log.Debug("not serving a file", zap.String("path", f.Path), zap.Error(err))
			continue
		}
		fh.Close()
		held[f.File.Key] = heldFile{dir: dir, rel: f.Path, id: id}
		out = append(out, object{Key: f.File.Key, Size: f.File.Size})
	}
	return held, out
}

// dir returns the folder path opened, once for the node's life (Close
// closes it).
func (n *Node) dir(path string) (*confine.Dir, error) {
	n.mu.Lock()
	d := n.roots[path]
	n.mu.Unlock()
	if d != nil {
		return d, nil
	}
	d, err := confine.Open(path)
	if err != nil {
		return nil, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if had := n.roots[path]; had != nil {
		d.Close()
		return had, nil
	}
	n.roots[path] = d
	return d, nil
}

// Holdings says what a seed holds of a committed step: the folder and the
// manifest's files in it (paths below the folder) that it may serve; none
// when it holds nothing of the step.
type Holdings func(ctx context.Context, step int64) (dir string, files []heldfile.File, err error)

// Seed serves the committed steps a node holds on disk to the nodes
// restoring them, without restoring anything itself: `ferry agent
// --serve-peers` beside a training job, whose checkpoints a replacement
// node then restores from the survivors. A restoring node lists the seed
// among its --peers; asked for its plan of a step, the seed answers with
// what hold says it holds, and serves ranges of those files only: regular
// files of the manifest's size with a single name, opened beneath the
// folder without following a link, and only while they are the file
// planned (checkHeld, serveHeld). cfg.Peers and cfg.Self are not used.
func Seed(cfg Config, hold Holdings) (*Node, error) {
	cfg.Peers, cfg.Self = []string{"seed"}, 0
	n, err := Start(cfg)
	if err != nil {
		return nil, err
	}
	n.mu.Lock()
	n.seed, n.held = hold, map[string]heldFile{}
	n.mu.Unlock()
	close(n.assigned) // nothing to assign: a seed serves what it holds
	return n, nil
}

// seedPlan is a seed's answer to a plan request: what it holds of the
// asked step, offered in the asker's range size.
func (n *Node) seedPlan(r *http.Request) (*plan, int, error) {
	q := r.URL.Query()
	step, err1 := strconv.ParseInt(q.Get("step"), 10, 64)
	chunk, err2 := strconv.ParseInt(q.Get("chunk"), 10, 64)
	if err1 != nil || err2 != nil || chunk <= 0 {
		return nil, http.StatusBadRequest, fmt.Errorf("a seed needs the step and the range size")
	}
	dir, files, err := n.seed(r.Context(), step)
	if err != nil {
		n.log.Debug("cannot offer a step to a peer", zap.Int64("step", step), zap.Error(err))
		return &plan{Step: step, Chunk: chunk, Seed: true}, http.StatusOK, nil
	}
	p := &plan{Step: step, Chunk: chunk, Seed: true}
	if len(files) == 0 {
		return p, http.StatusOK, nil
	}
	d, err := n.dir(dir)
	if err != nil {
		n.log.Debug("cannot offer a step to a peer", zap.Int64("step", step), zap.Error(err))
		return p, http.StatusOK, nil
	}
	held, objs := n.heldFiles(d, files, true)
	p.Held = objs
	n.mu.Lock()
	for k, h := range held {
		n.held[k] = h // the latest check: a file changed since is offered as it is now
	}
	n.mu.Unlock()
	n.log.Info("offering a committed step to a restoring node", zap.Int64("step", step), zap.Int("files", len(p.Held)),
		zap.String("peer", q.Get("from")))
	return p, http.StatusOK, nil
}
