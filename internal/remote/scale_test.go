package remote

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/manifest"
)

// commitRun is one step committed by n nodes at once against a store with
// per-request latency. Every manifest PUT is checked against the parts
// present at that moment.
type commitRun struct {
	n        int
	spread   time.Duration // nodes start within this window
	latency  time.Duration
	preClaim bool // a claimant claimed the merge and died before any node ran

	results  []NodeCommit
	partGets atomic.Int64
	early    atomic.Int64 // manifest PUTs made while a part was missing
}

func (r *commitRun) run(t *testing.T) *store.MemStore {
	t.Helper()
	ctx := context.Background()
	mem := store.NewMemStore()
	set := manifest.PartSet{Step: 100, Nodes: r.n}
	st := &store.Faulty{Inner: mem, Before: func(op, key string) error {
		time.Sleep(r.latency)
		if _, _, ok := manifest.ParsePartKey("run", key); ok && op == "Get" {
			r.partGets.Add(1)
		}
		if op == "Put" && key == manifest.ManifestKey("run", 100) {
			for k := range r.n {
				if _, err := mem.Head(ctx, manifest.PartKey("run", set, k)); err != nil {
					r.early.Add(1)
				}
			}
		}
		return nil
	}}
	if r.preClaim {
		if _, err := claimMerge(ctx, mem, "run", set, r.n-1); err != nil {
			t.Fatal(err)
		}
	}
	r.results = make([]NodeCommit, r.n)
	errs := make([]error, r.n)
	var wg sync.WaitGroup
	for k := range r.n {
		delay := time.Duration(0)
		if r.spread > 0 {
			delay = rand.N(r.spread)
		}
		wg.Go(func() {
			time.Sleep(delay)
			r.results[k], errs[k] = CommitNodePart(ctx, st, "run", nodePart(k, r.n))
		})
	}
	wg.Wait()
	for k, err := range errs {
		if err != nil {
			t.Fatalf("node %d: %v", k, err)
		}
	}
	return mem
}

// check asserts one manifest, equal to the merge of the parts, never
// written before every part was there, and that every node that saw the set
// complete knows the step is committed.
func (r *commitRun) check(t *testing.T, mem *store.MemStore) (merged, committed int) {
	t.Helper()
	if n := r.early.Load(); n != 0 {
		t.Fatalf("%d manifest PUTs while a part was missing", n)
	}
	parts := make([]*manifest.Part, r.n)
	for k := range r.n {
		parts[k] = nodePart(k, r.n)
	}
	want, err := manifest.MergeParts(parts)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Get(context.Background(), mem, "run", 100)
	if err != nil {
		t.Fatalf("step not committed: %v", err)
	}
	if !manifest.SameContent(got, want) {
		t.Fatal("the committed manifest is not the merge of the parts")
	}
	manifests := 0
	for _, k := range mem.Objects() {
		if strings.HasPrefix(k, manifest.ManifestsPrefix("run")) {
			manifests++
		}
	}
	if manifests != 1 {
		t.Fatalf("%d manifests", manifests)
	}
	done := 0
	for _, res := range r.results {
		if res.Merged {
			merged++
		}
		if res.Committed {
			committed++
		}
		if res.Done() {
			done++
		}
	}
	if committed != 1 || done == 0 {
		t.Fatalf("%d nodes wrote the manifest, %d know it is committed", committed, done)
	}
	return merged, committed
}

// TestCommitNodePartScale: 64 nodes finishing together, and spread over
// 200 ms, with 2 ms per request: one merge reads each part once.
func TestCommitNodePartScale(t *testing.T) {
	const n = 64
	for _, spread := range []time.Duration{0, 200 * time.Millisecond} {
		t.Run(fmt.Sprint("spread=", spread), func(t *testing.T) {
			r := &commitRun{n: n, spread: spread, latency: 2 * time.Millisecond}
			mem := r.run(t)
			merged, _ := r.check(t, mem)
			if merged != 1 || r.partGets.Load() > n*5/4 {
				t.Fatalf("%d merges, %d part GETs for %d nodes; want 1 merge, at most %d GETs", merged, r.partGets.Load(), n, n*5/4)
			}
		})
	}
}

// TestCommitNodePartDeadClaimant: the node that claimed the merge died
// before merging; the others wait out the lease and one of them commits.
func TestCommitNodePartDeadClaimant(t *testing.T) {
	saved := claimTiming
	t.Cleanup(func() { claimTiming = saved })
	claimTiming.lease, claimTiming.maxPoll, claimTiming.spread = 150*time.Millisecond, 20*time.Millisecond, 100*time.Millisecond
	r := &commitRun{n: 8, latency: time.Millisecond, preClaim: true}
	mem := r.run(t)
	merged, _ := r.check(t, mem)
	if merged < 1 || merged > 2 {
		t.Fatalf("%d merges after the lease, want 1 (2 at worst)", merged)
	}
	if _, err := mem.Head(context.Background(), manifest.DoneKey("run", manifest.PartSet{Step: 100, Nodes: 8})); err != nil {
		t.Fatalf("no done marker after the fallback merge: %v", err)
	}
}

// TestCommitWaitsForDoneMarker: a node that lost the claim reports the step
// committed by a peer only once the marker is there, and stops waiting
// when its context ends.
func TestCommitWaitsForDoneMarker(t *testing.T) {
	ctx := context.Background()
	mem := store.NewMemStore()
	set := manifest.PartSet{Step: 100, Nodes: 2}
	if _, err := CommitNodePart(ctx, mem, "run", nodePart(0, 2)); err != nil {
		t.Fatal(err)
	}
	if _, err := claimMerge(ctx, mem, "run", set, 0); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	res, err := CommitNodePart(cctx, mem, "run", nodePart(1, 2))
	if !errors.Is(err, context.DeadlineExceeded) || res.Done() {
		t.Fatalf("without a marker: %+v, %v", res.Completion, err)
	}
	// The claimant commits the merge, then writes the marker.
	merged, err := manifest.MergeParts([]*manifest.Part{nodePart(0, 2), nodePart(1, 2)})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := Commit(ctx, mem, "run", merged); err != nil {
		t.Fatal(err)
	}
	if err := putMarker(ctx, mem, manifest.DoneKey("run", set), 100, 0); err != nil {
		t.Fatal(err)
	}
	c, err := completeStep(ctx, mem, "run", set, 1, false)
	if err != nil || !c.ByPeer || c.Merged || c.Manifest != nil {
		t.Fatalf("with the marker: %+v, %v", c, err)
	}
}

// TestCommitIgnoresStaleDoneMarker: a claim and a done marker left from a
// pruned step (no manifest) must not make the nodes of a new push of the
// step believe it committed: after the lease one of them commits it.
func TestCommitIgnoresStaleDoneMarker(t *testing.T) {
	saved := claimTiming
	t.Cleanup(func() { claimTiming = saved })
	claimTiming.lease, claimTiming.maxPoll, claimTiming.spread = 150*time.Millisecond, 20*time.Millisecond, 100*time.Millisecond
	ctx := context.Background()
	mem := store.NewMemStore()
	set := manifest.PartSet{Step: 100, Nodes: 2}
	for _, key := range []string{manifest.ClaimKey("run", set), manifest.DoneKey("run", set)} {
		if err := putMarker(ctx, mem, key, 100, 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := CommitNodePart(ctx, mem, "run", nodePart(0, 2)); err != nil {
		t.Fatal(err)
	}
	res, err := CommitNodePart(ctx, mem, "run", nodePart(1, 2))
	if err != nil || res.ByPeer || !res.Committed {
		t.Fatalf("node 1: %+v, %v; want it to commit the step itself", res.Completion, err)
	}
	if _, err := Get(ctx, mem, "run", 100); err != nil {
		t.Fatalf("step not committed: %v", err)
	}
}
