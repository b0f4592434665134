package scale

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"time"

	"github.com/ferrylabs/ferry/internal/remote"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/manifest"
	"github.com/ferrylabs/ferry/restore"
)

// manifestResult measures one step of many files: its manifest's size,
// encode and decode, and restore planning for every file and for one
// node's ranks.
type manifestResult struct {
	Files         int           `json:"files"`
	Bytes         int64         `json:"bytes"` // the manifest and its shards
	Shards        int           `json:"shards"`
	Encode        time.Duration `json:"encode_ns"`
	Decode        time.Duration `json:"decode_ns"`
	DecodeAlloc   uint64        `json:"decode_alloc_bytes"` // allocated by one decode
	DecodedHeap   uint64        `json:"decoded_heap_bytes"` // live heap holding the decoded manifest
	PlanAll       time.Duration `json:"plan_all_ns"`
	PlanNode      time.Duration `json:"plan_node_ns"`
	PlanNodeFiles int           `json:"plan_node_files"`
	PlanRequests  int64         `json:"plan_requests"`
	Error         string        `json:"error,omitempty"`
}

// bigManifest is a DCP-like step of files: a file per rank per writer
// thread, 8 threads per rank, 8 ranks per node.
func bigManifest(files int) *manifest.Manifest {
	m := &manifest.Manifest{Format: manifest.FormatVersion, Step: simStep, Created: time.Now().UTC().Truncate(time.Millisecond)}
	m.Nodes = max(files/64, 1)
	hash := strings.Repeat("5f", 32)
	m.Files = make([]manifest.File, files)
	for i := range files {
		r := i / 8
		p := fmt.Sprintf("step-%d/model-rank%d-shard%d.pt", simStep, r, i%8)
		m.Files[i] = manifest.File{Path: p, Size: 64 << 20, BLAKE3: hash, PartSize: 64 << 20, Rank: &r,
			Key: manifest.DataKey(simPrefix, simStep, "a1b2c3d4", p)}
	}
	return m
}

func measureManifest(ctx context.Context, dir string, files int, latency time.Duration) manifestResult {
	res := manifestResult{Files: files}
	mem := store.NewMemStore()
	start := time.Now()
	c, _, err := remote.Commit(ctx, mem, simPrefix, bigManifest(files))
	res.Encode = time.Since(start)
	if err != nil {
		res.Error = err.Error()
		return res
	}
	info, err := mem.Head(ctx, manifest.ManifestKey(simPrefix, simStep))
	if err != nil {
		res.Error = err.Error()
		return res
	}
	res.Bytes, res.Shards = info.Size, len(c.Shards)
	for _, sh := range c.Shards {
		res.Bytes += sh.Size
	}
	c = nil
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start = time.Now()
	decoded, err := remote.Get(ctx, mem, simPrefix, simStep)
	res.Decode = time.Since(start)
	runtime.ReadMemStats(&after)
	res.DecodeAlloc = after.TotalAlloc - before.TotalAlloc
	runtime.GC()
	runtime.ReadMemStats(&after)
	if after.HeapAlloc > before.HeapAlloc {
		res.DecodedHeap = after.HeapAlloc - before.HeapAlloc
	}
	if err != nil {
		res.Error = err.Error()
		return res
	}
	runtime.KeepAlive(decoded)
	decoded = nil
	if err := planBig(ctx, dir, mem, latency, &res); err != nil {
		res.Error = err.Error()
	}
	return res
}

// planBig plans a restore of every file, then one of node 0's 8 ranks.
func planBig(ctx context.Context, dir string, mem store.Store, latency time.Duration, res *manifestResult) error {
	p, err := planTwice(ctx, mem, dir, latency, func(o *restore.Options) { o.Ranks = func(r *int) bool { return *r < 8 } })
	res.PlanAll, res.PlanNode, res.PlanNodeFiles, res.PlanRequests = p.all, p.node, p.nodeFiles, p.requests
	return err
}
