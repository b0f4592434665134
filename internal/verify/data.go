package verify

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"

	"github.com/zeebo/blake3"
	"golang.org/x/sync/errgroup"

	"github.com/ferrylabs/ferry/internal/blake3tree"
	"github.com/ferrylabs/ferry/manifest"
)

// choose returns the files to read for share of the bytes: all of them at
// 1 or more, else a random choice, in random order, until that share of
// the bytes is covered (at least one file).
func choose(files []manifest.File, share float64) []manifest.File {
	if share >= 1 || len(files) == 0 {
		return files
	}
	var total int64
	for _, f := range files {
		total += f.Size
	}
	order := rand.Perm(len(files))
	var out []manifest.File
	var got int64
	for _, i := range order {
		if len(out) > 0 && float64(got) >= share*float64(total) {
			break
		}
		out = append(out, files[i])
		got += files[i].Size
	}
	return out
}

// rangeJob is one ranged GET of a file being read.
type rangeJob struct {
	file *fileRead
	i    int
}

// fileRead is one file's read: the BLAKE3 subtree of each range.
type fileRead struct {
	f     manifest.File
	mu    sync.Mutex
	nodes []blake3tree.Node
	err   error // the first read error, if any
}

// readFiles reads every byte of files in ranges, Concurrency GETs at a
// time across files, and returns a problem for each file whose bytes do
// not hash to its BLAKE3 or could not be read.
func readFiles(ctx context.Context, opts Options, step int64, files []manifest.File) ([]Problem, error) {
	reads := make([]*fileRead, len(files))
	var jobs []rangeJob
	for i, f := range files {
		n := max(int((f.Size+DefaultRangeSize-1)/DefaultRangeSize), 1)
		reads[i] = &fileRead{f: f, nodes: make([]blake3tree.Node, n)}
		for j := range n {
			jobs = append(jobs, rangeJob{file: reads[i], i: j})
		}
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(opts.Concurrency)
	for _, j := range jobs {
		g.Go(func() error { return readRange(gctx, opts, j) })
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var probs []Problem
	for _, r := range reads {
		if p, ok := r.problem(step); !ok {
			probs = append(probs, p)
		}
	}
	return probs, nil
}

// readRange reads range j.i of its file and keeps its subtree node. A
// failed read is the file's problem, not the check's, unless ctx ended.
// A packed file's bytes are read from its pack, at its offset there, and
// never past its end: the next byte is the next file's.
func readRange(ctx context.Context, opts Options, j rangeJob) error {
	f := j.file.f
	off := int64(j.i) * DefaultRangeSize
	n := min(DefaultRangeSize, f.Size-off)
	node, err := hashRange(ctx, opts, f.Key, f.Offset, off, n)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	j.file.mu.Lock()
	defer j.file.mu.Unlock()
	if err != nil {
		if j.file.err == nil {
			// Bytes of the object Key, the pack's for a packed file.
			j.file.err = fmt.Errorf("bytes %d-%d: %w", f.Offset+off, f.Offset+off+n, err)
		}
		return nil
	}
	j.file.nodes[j.i] = node
	return nil
}

// hashRange GETs the n bytes of a file from off, which lie in object key
// from base+off (base is a packed file's offset in its pack, else 0), and
// returns their subtree node.
func hashRange(ctx context.Context, opts Options, key string, base, off, n int64) (blake3tree.Node, error) {
	h, err := blake3tree.NewRange(off)
	if err != nil {
		return blake3tree.Node{}, err
	}
	if n == 0 {
		return h.Node(), nil
	}
	body, err := opts.Store.Get(ctx, key, base+off, n)
	if err != nil {
		return blake3tree.Node{}, err
	}
	defer body.Close()
	got, err := io.CopyBuffer(h, body, make([]byte, 256<<10))
	if err != nil {
		return blake3tree.Node{}, err
	}
	if got != n {
		return blake3tree.Node{}, fmt.Errorf("object ended after %d of %d bytes", got, n)
	}
	return h.Node(), nil
}

// problem compares the file's bytes, as read, with its BLAKE3.
func (r *fileRead) problem(step int64) (Problem, bool) {
	p := Problem{Step: step, Path: r.f.Path, Key: r.f.Key}
	if r.err != nil {
		p.Kind, p.Detail = Unreadable, r.err.Error()
		return p, false
	}
	sum, err := r.sum()
	if err != nil {
		p.Kind, p.Detail = Unreadable, err.Error()
		return p, false
	}
	if sum != r.f.BLAKE3 {
		what := "the object's bytes"
		if r.f.Packed() {
			what = fmt.Sprintf("its bytes %d-%d of the pack", r.f.Offset, r.f.Offset+r.f.Size)
		}
		p.Kind, p.Detail = WrongHash, fmt.Sprintf("%s hash to %s, the manifest says %s", what, sum, r.f.BLAKE3)
		return p, false
	}
	return p, true
}

// sum is the file's BLAKE3 from its ranges.
func (r *fileRead) sum() (string, error) {
	if r.f.Size == 0 {
		return hex.EncodeToString(blake3.New().Sum(nil)), nil
	}
	return blake3tree.Sum(r.nodes)
}
