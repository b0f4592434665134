package scale

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/ferrylabs/ferry/agent/detect"
	"github.com/ferrylabs/ferry/internal/r2cost"
	"github.com/ferrylabs/ferry/internal/s3store"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/manifest"
	"github.com/ferrylabs/ferry/restore"
	"github.com/ferrylabs/ferry/uploader"
)

// Each simulated node holds 8 ranks of 3 shards and the job's config.
const (
	ranksPerNode = 8
	shardsPerRnk = 3
	simStep      = 100
	simPrefix    = "run"
)

// commitResult is one step committed by N simulated nodes.
type commitResult struct {
	Nodes           int              `json:"nodes"`
	Spread          time.Duration    `json:"spread_ns"`
	Files           int              `json:"files"`
	Requests        map[string]int64 `json:"requests"`
	MaxNodeRequests int64            `json:"max_node_requests"`
	PartGets        int64            `json:"part_gets"`
	Merges          int              `json:"merges"`
	CommitLatency   time.Duration    `json:"commit_latency_ns"` // manifest visible after the last part landed
	Wall            time.Duration    `json:"wall_ns"`
	Cost            float64          `json:"cost_usd"`
	ManifestBytes   int64            `json:"manifest_bytes"`
	PlanAll         time.Duration    `json:"plan_all_ns"`  // restore of every file, planned
	PlanNode        time.Duration    `json:"plan_node_ns"` // restore of node 0's ranks, planned
	PlanNodeFiles   int              `json:"plan_node_files"`
	PlanAllFiles    int              `json:"plan_all_files"`
}

// writeNodes writes each node's files: 8 ranks x 3 shards, and a config
// every node holds with the same bytes.
func writeNodes(dir string, n int) ([]detect.Step, error) {
	steps := make([]detect.Step, n)
	for k := range n {
		nd := filepath.Join(dir, fmt.Sprintf("node-%05d", k))
		if err := os.MkdirAll(nd, 0o755); err != nil {
			return nil, err
		}
		for r := k * ranksPerNode; r < (k+1)*ranksPerNode; r++ {
			for s := range shardsPerRnk {
				data := fmt.Appendf(nil, "rank %d shard %d of step %d\n", r, s, simStep)
				if err := os.WriteFile(filepath.Join(nd, fmt.Sprintf("model-rank%d-shard%d.pt", r, s)), data, 0o644); err != nil {
					return nil, err
				}
			}
		}
		if err := os.WriteFile(filepath.Join(nd, "config.json"), []byte(`{"lr": 0.1}`+"\n"), 0o644); err != nil {
			return nil, err
		}
		s, _, err := detect.Gather([]string{nd}, zap.NewNop())
		if err != nil {
			return nil, err
		}
		s.Number = simStep
		steps[k] = s
	}
	return steps, nil
}

// simulateCommit pushes one step from n nodes that start within spread,
// each through the real uploader.Destination.Push (the multi-node protocol included),
// against an in-memory store with latency per request.
func simulateCommit(ctx context.Context, dir string, n int, spread, latency time.Duration) (commitResult, error) {
	steps, err := writeNodes(dir, n)
	if err != nil {
		return commitResult{}, fmt.Errorf("write node files: %w", err)
	}
	mem := store.NewMemStore()
	var mu sync.Mutex
	var lastPart, manifestAt time.Time
	mkey := manifest.ManifestKey(simPrefix, simStep)
	onPut := func(key string) {
		now := time.Now()
		mu.Lock()
		defer mu.Unlock()
		if _, _, ok := manifest.ParsePartKey(simPrefix, key); ok && now.After(lastPart) {
			lastPart = now
		}
		if key == mkey {
			manifestAt = now
		}
	}
	nodeCounts := make([]*s3store.Counters, n)
	partGets := make([]int64, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := time.Now()
	for k := range n {
		nodeCounts[k] = &s3store.Counters{}
		st := &simStore{inner: mem, latency: latency, counts: nodeCounts[k], onPut: onPut, onGet: func(key string) {
			if _, _, ok := manifest.ParsePartKey(simPrefix, key); ok {
				mu.Lock()
				partGets[k]++
				mu.Unlock()
			}
		}}
		delay := time.Duration(0)
		if spread > 0 {
			delay = rand.N(spread)
		}
		wg.Go(func() {
			time.Sleep(delay)
			dest := uploader.Destination{Store: st, Location: "s3://sim/" + simPrefix, Prefix: simPrefix, Nodes: n, NodeRank: k, Logger: zap.NewNop()}
			_, errs[k] = dest.Push(ctx, steps[k], uploader.PushOptions{
				Upload: uploader.Options{Concurrency: 2}, // 4,096 nodes share one fd table here
			})
		})
	}
	wg.Wait()
	res := commitResult{Nodes: n, Spread: spread, Wall: time.Since(start), Requests: map[string]int64{}}
	for k, err := range errs {
		if err != nil {
			return res, fmt.Errorf("node %d: %w", k, err)
		}
	}
	for k := range n {
		var total int64
		for op, c := range nodeCounts[k].Snapshot() {
			res.Requests[op] += c
			total += c
		}
		res.MaxNodeRequests = max(res.MaxNodeRequests, total)
		res.PartGets += partGets[k]
		if partGets[k] >= int64(n) {
			res.Merges++
		}
	}
	if manifestAt.IsZero() {
		return res, fmt.Errorf("%d nodes: the step was not committed", n)
	}
	res.CommitLatency = manifestAt.Sub(lastPart)
	res.Cost = r2cost.Requests(res.Requests)
	return res, planRestores(ctx, mem, dir, n, latency, &res)
}

// planRestores plans a restore of every file and one of node 0's share,
// as a node of the job's entrypoint would (find, read and validate the
// manifest, select, check every target path), and measures each.
func planRestores(ctx context.Context, mem store.Store, dir string, n int, latency time.Duration, res *commitResult) error {
	info, err := mem.Head(ctx, manifest.ManifestKey(simPrefix, simStep))
	if err != nil {
		return err
	}
	res.ManifestBytes = info.Size
	p, err := planTwice(ctx, mem, dir, latency, func(o *restore.Options) { o.Nodes, o.NodeRank = n, 0 })
	res.PlanAll, res.PlanAllFiles, res.Files = p.all, p.allFiles, p.allFiles
	res.PlanNode, res.PlanNodeFiles = p.node, p.nodeFiles
	return err
}

// planned is what planTwice measured.
type planned struct {
	all, node           time.Duration
	allFiles, nodeFiles int
	requests            int64
}

// planTwice plans, through a store with latency, a restore of every file
// and one that node selects.
func planTwice(ctx context.Context, mem store.Store, dir string, latency time.Duration, node func(*restore.Options)) (planned, error) {
	var p planned
	c := &s3store.Counters{}
	st := &simStore{inner: mem, latency: latency, counts: c}
	for _, one := range []bool{false, true} {
		opts := restore.Options{Store: st, Prefix: simPrefix, Dir: filepath.Join(dir, "restore"), Step: restore.LatestStep, PlanOnly: true, Logger: zap.NewNop()}
		if one {
			node(&opts)
		}
		start := time.Now()
		r, err := restore.Restore(ctx, opts)
		if err != nil {
			return p, fmt.Errorf("plan restore: %w", err)
		}
		if one {
			p.node, p.nodeFiles = time.Since(start), r.Files
		} else {
			p.all, p.allFiles = time.Since(start), r.Files
		}
	}
	p.requests = c.Total()
	return p, nil
}
