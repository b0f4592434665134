package restore

import (
	"context"
	"errors"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/internal/remote"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/manifest"
)

// node is one node's restore in a barrier test.
type barrierNode struct {
	res Result
	err error
	dir string
}

// restoreNodes restores the latest step with one restore per rank of
// crossSteps' checkpoint (node k restores rank k), all at once, each
// through stores[k], with a barrier of run "job-7.0".
func restoreNodes(t *testing.T, stores []store.Store, fallback bool, timeout time.Duration) []barrierNode {
	t.Helper()
	out := make([]barrierNode, len(stores))
	var wg sync.WaitGroup
	for k, st := range stores {
		out[k].dir = t.TempDir()
		wg.Go(func() {
			out[k].res, out[k].err = Restore(context.Background(), Options{Store: st, Prefix: testPrefix, Dir: out[k].dir, Step: LatestStep,
				Ranks: RankRange(k, k+1).Filter(), Fallback: fallback, RecordBy: "node-" + string(rune('0'+k)),
				Barrier: &Barrier{Run: "job-7.0", Nodes: len(stores), Node: k, Timeout: timeout, Poll: 20 * time.Millisecond, MaxPoll: 100 * time.Millisecond}})
		})
	}
	wg.Wait()
	return out
}

// slowKey delays the first GET of one object, so that the node reading it
// finishes last.
func slowKey(st store.Store, key string, d time.Duration) store.Store {
	return &hookStore{Store: st, body: func(k string, _ int64, n int, rc io.ReadCloser) io.ReadCloser {
		if k == key && n == 0 {
			time.Sleep(d)
		}
		return rc
	}}
}

// Two nodes, each restoring its own rank of the latest step, with a
// barrier: node 1 reads its shard late, so node 0 has long verified its
// own files. Both place step 2 only once both checked in; node 0 says it
// waited for node 1.
func TestBarrierPlacesOnceEveryNodeVerified(t *testing.T) {
	mem := store.NewMemStore()
	m, files := crossSteps(t, mem)
	nodes := restoreNodes(t, []store.Store{mem, slowKey(mem, m.Files[2].Key, 300*time.Millisecond)}, true, time.Minute)
	for k, n := range nodes {
		if n.err != nil || n.res.Step != 2 || len(n.res.Barrier) != 1 || n.res.Barrier[0].Outcome != "all checked in" || n.res.Barrier[0].Step != 2 {
			t.Fatalf("node %d: step %d, %v, barrier %+v; want step 2 placed with every node checked in", k, n.res.Step, n.err, n.res.Barrier)
		}
		assertFile(t, filepath.Join(n.dir, files[2][k+1].path), files[2][k+1].data)
	}
	if b := nodes[0].res.Barrier[0]; !slices.Equal(b.WaitedFor, []int{1}) || b.Seconds < 0.1 || b.Looks < 2 {
		t.Errorf("node 0's barrier %+v: want it to have waited for node 1", b)
	}
	set := manifest.PartSet{Step: 2, Nodes: 2, Run: "job-7.0"}
	if in, err := remote.CheckedIn(context.Background(), mem, testPrefix, set); err != nil || !slices.Equal(in, []bool{true, true}) {
		t.Errorf("check-ins %v, %v; want both nodes'", in, err)
	}
}

// A flipped byte in rank 1's shard only node 1 reads. Without the barrier
// node 0, done first, placed step 2 while node 1 fell back to step 1.
// With it node 0 waits at step 2, sees node 1's record, falls back, and
// both nodes place step 1 after meeting at its barrier; nothing of step 2
// is placed on either. Without fallback both fail as damaged, nothing
// placed.
func TestBarrierFlippedByteOnlyOneNodeReads(t *testing.T) {
	for _, fallback := range []bool{true, false} {
		mem := store.NewMemStore()
		m, files := crossSteps(t, mem)
		bad := append([]byte(nil), files[2][2].data...)
		bad[100] ^= 1
		overwrite(t, mem, m.Files[2].Key, bad)
		nodes := restoreNodes(t, []store.Store{mem, slowKey(mem, m.Files[2].Key, 200*time.Millisecond)}, fallback, time.Minute)
		for k, n := range nodes {
			if !fallback {
				if !errors.Is(n.err, ErrDamaged) || len(tree(t, n.dir)) != 0 {
					t.Fatalf("node %d without fallback: %v, target holds %v; want damaged, nothing placed", k, n.err, tree(t, n.dir))
				}
				continue
			}
			if n.err != nil || n.res.Step != 1 || len(n.res.Skipped) != 1 || n.res.Skipped[0].Step != 2 {
				t.Fatalf("node %d: step %d, %v, skipped %+v; want step 1, step 2 skipped", k, n.res.Step, n.err, n.res.Skipped)
			}
			if got := tree(t, n.dir); strings.Join(got, " ") != files[1][k+1].path+" shared.json" {
				t.Fatalf("node %d holds %v", k, got)
			}
			assertFile(t, filepath.Join(n.dir, files[1][k+1].path), files[1][k+1].data)
			last := n.res.Barrier[len(n.res.Barrier)-1]
			if last.Step != 1 || last.Outcome != "all checked in" {
				t.Errorf("node %d: barrier %+v; want step 1 placed with every node checked in", k, n.res.Barrier)
			}
		}
		if !fallback {
			continue
		}
		s := nodes[0].res.Skipped[0]
		if s.Record != "already recorded" || s.Path != "rank1.pt" || !strings.Contains(s.Reason, "by node-1") {
			t.Errorf("node 0 skipped %+v; want node 1's record of rank1.pt", s)
		}
		if b := nodes[0].res.Barrier; len(b) != 2 || b[0].Step != 2 || b[0].Outcome != "damaged" {
			t.Errorf("node 0's barrier %+v; want step 2 damaged while it waited, then step 1", b)
		}
	}
}

// A node that never checks in: the other waits until the timeout and
// fails, naming the missing node, with nothing placed and no temp file.
func TestBarrierTimeout(t *testing.T) {
	mem := store.NewMemStore()
	crossSteps(t, mem)
	dir := t.TempDir()
	start := time.Now()
	res, err := Restore(context.Background(), Options{Store: mem, Prefix: testPrefix, Dir: dir, Step: LatestStep,
		Ranks: RankRange(0, 1).Filter(), Fallback: true,
		Barrier: &Barrier{Run: "job-7.0", Nodes: 3, Node: 0, Timeout: 300 * time.Millisecond, Poll: 20 * time.Millisecond}})
	took := time.Since(start)
	if !errors.Is(err, ErrBarrierTimeout) || !strings.Contains(err.Error(), "nodes 1, 2 never checked in within 300ms") {
		t.Fatalf("restore: %v; want the barrier timed out, naming nodes 1 and 2", err)
	}
	if took < 300*time.Millisecond || took > 5*time.Second {
		t.Errorf("the restore took %v; want the timeout, 300ms", took)
	}
	if got := tree(t, dir); len(got) != 0 {
		t.Fatalf("a restore whose barrier timed out left %v", got)
	}
	if len(res.Barrier) != 1 || res.Barrier[0].Outcome != "timed out" || !slices.Equal(res.Barrier[0].Missing, []int{1, 2}) {
		t.Errorf("barrier %+v", res.Barrier)
	}
	if len(res.Skipped) != 0 {
		t.Errorf("skipped %+v: a timeout is not damage", res.Skipped)
	}
}

// One node: no barrier, no check-in written. A barrier without a run is
// refused before anything is read.
func TestBarrierOneNodeOrNoRun(t *testing.T) {
	mem := store.NewMemStore()
	crossSteps(t, mem)
	res, err := Restore(context.Background(), Options{Store: mem, Prefix: testPrefix, Dir: t.TempDir(), Step: LatestStep,
		Barrier: &Barrier{Run: "job-7.0", Nodes: 1}})
	if err != nil || res.Step != 2 || len(res.Barrier) != 0 {
		t.Fatalf("one node: step %d, %v, barrier %+v", res.Step, err, res.Barrier)
	}
	var keys []string
	_ = mem.List(context.Background(), manifest.CheckinsPrefix(testPrefix), "", 0, func(o store.ObjectInfo) error {
		keys = append(keys, o.Key)
		return nil
	})
	if len(keys) != 0 {
		t.Errorf("check-ins of a one-node restore: %v", keys)
	}
	if _, err := Restore(context.Background(), Options{Store: mem, Prefix: testPrefix, Dir: t.TempDir(), Step: LatestStep,
		Barrier: &Barrier{Nodes: 2}}); err == nil || !strings.Contains(err.Error(), "no run identity") {
		t.Errorf("a barrier without a run: %v", err)
	}
}

// Objects of a step above the latest committed one, without its manifest
// (a deleted manifest, or an upload not finished): the restore says which
// step, with one LIST of one key, and restores the latest all the same.
// With no manifest at all it says so too, and finds nothing committed.
func TestNewerDataWarned(t *testing.T) {
	mem := store.NewMemStore()
	crossSteps(t, mem)
	res, err := Restore(context.Background(), Options{Store: mem, Prefix: testPrefix, Dir: t.TempDir(), Step: LatestStep})
	if err != nil || res.NewerData != 0 {
		t.Fatalf("no newer objects: %d, %v", res.NewerData, err)
	}
	overwrite(t, mem, manifest.DataKey(testPrefix, 3, "a1", "rank0.pt"), []byte("x"))
	overwrite(t, mem, manifest.DataKey(testPrefix, 12, "a1", "rank0.pt"), []byte("x"))
	res, err = Restore(context.Background(), Options{Store: mem, Prefix: testPrefix, Dir: t.TempDir(), Step: LatestStep})
	if err != nil || res.Step != 2 || res.NewerData != 3 {
		t.Fatalf("step %d, newer %d, %v; want step 2 restored and step 3's objects named", res.Step, res.NewerData, err)
	}
	for _, step := range []int64{1, 2} {
		if err := mem.Delete(context.Background(), manifest.ManifestKey(testPrefix, step)); err != nil {
			t.Fatal(err)
		}
	}
	res, err = Restore(context.Background(), Options{Store: mem, Prefix: testPrefix, Dir: t.TempDir(), Step: LatestStep})
	if !errors.Is(err, remote.ErrNoCheckpoint) || res.NewerData != 1 {
		t.Fatalf("no manifest: newer %d, %v; want nothing committed and step 1's objects named", res.NewerData, err)
	}
}
