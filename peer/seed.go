package peer

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"

	"go.uber.org/zap"

	"github.com/ferrylabs/ferry/restore"
)

// heldFile is a file a node serves from its own disk.
type heldFile struct {
	root *os.Root // the folder it is in: no path leaves it, no link out
	rel  string
	size int64
}

// addHeld records files (below root) in held, unless held has them
// already, and returns them as plan objects, each key once. Packed files
// are left out: their key names a pack of several files, which no one
// file on disk is (restore reads packs from the bucket).
func addHeld(held map[string]heldFile, root *os.Root, files []restore.HeldFile) []object {
	var out []object
	seen := map[string]bool{}
	for _, f := range files {
		if f.File.Packed() || seen[f.File.Key] {
			continue
		}
		seen[f.File.Key] = true
		if _, ok := held[f.File.Key]; !ok {
			held[f.File.Key] = heldFile{root: root, rel: f.Path, size: f.File.Size}
		}
		out = append(out, object{Key: f.File.Key, Size: f.File.Size})
	}
	return out
}

// Holdings says what a seed holds of a committed step: the folder and the
// manifest's files in it (paths below the folder) that it may serve; none
// when it holds nothing of the step.
type Holdings func(ctx context.Context, step int64) (dir string, files []restore.HeldFile, err error)

// Seed serves the committed steps a node holds on disk to the nodes
// restoring them, without restoring anything itself: `ferry agent
// --peer-listen` beside a training job, whose checkpoints a replacement
// node then restores from the survivors. A restoring node lists the seed
// among its --peers; asked for its plan of a step, the seed answers with
// what hold says it holds, and serves ranges of those files only, as any
// holder does (regular files of the manifest's size, opened through an
// os.Root). cfg.Peers and cfg.Self are not used.
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
	root, err := os.OpenRoot(dir)
	if err != nil {
		return p, http.StatusOK, nil
	}
	n.mu.Lock()
	n.roots = append(n.roots, root)
	p.Held = addHeld(n.held, root, files)
	n.mu.Unlock()
	n.log.Info("offering a committed step to a restoring node", zap.Int64("step", step), zap.Int("files", len(p.Held)),
		zap.String("peer", q.Get("from")))
	return p, http.StatusOK, nil
}
