package prune

import (
	"bytes"
	"context"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/agent/detect"
	"github.com/ferrylabs/ferry/internal/remote"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/manifest"
	"github.com/ferrylabs/ferry/restore"
	"github.com/ferrylabs/ferry/uploader"
)

const prefix = "run"

func write(t *testing.T, path string, size int, seed int64) {
	t.Helper()
	data := make([]byte, size)
	rand.New(rand.NewSource(seed)).Read(data)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// pushCase is what a test may change about a push.
type pushCase struct {
	uploader.Destination
	uploader.PushOptions
}

func pushDir(t *testing.T, st store.Store, dir string, step int64, mod func(*pushCase)) uploader.PushResult {
	t.Helper()
	s, _, err := detect.Gather([]string{dir}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.Number = step
	c := pushCase{Destination: uploader.Destination{Store: st, Location: "s3://b/run", Prefix: prefix}}
	if mod != nil {
		mod(&c)
	}
	res, err := c.Destination.Push(context.Background(), s, c.PushOptions)
	if err != nil {
		t.Fatalf("push step %d: %v", step, err)
	}
	return res
}

// history pushes steps 10..50 of a checkpoint with a frozen file (deduped
// across steps) and one that changes every step.
func history(t *testing.T, st store.Store) string {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "frozen.bin"), 1000, 1)
	for i := int64(1); i <= 5; i++ {
		write(t, filepath.Join(dir, "weights.bin"), 500, 100+i)
		pushDir(t, st, dir, 10*i, nil)
	}
	return dir
}

func verifyRestores(t *testing.T, st store.Store, steps ...int64) {
	t.Helper()
	for _, s := range steps {
		if _, err := restore.Restore(context.Background(), restore.Options{Store: st, Prefix: prefix, Dir: t.TempDir(), Step: s}); err != nil {
			t.Errorf("restore step %d after prune: %v", s, err)
		}
	}
}

func steps(t *testing.T, st store.Store) []int64 {
	t.Helper()
	s, err := remote.Steps(context.Background(), st, prefix, 0)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestPrunePolicyDryRunEqualsRun(t *testing.T) {
	ctx := context.Background()
	mem := store.NewMemStore()
	history(t, mem)
	opts := Options{Store: mem, Prefix: prefix, Policy: Policy{KeepLast: 2, KeepEvery: 20}, MinAge: -1}
	before := mem.Objects()
	unref := unreferenced(t, mem, []int64{30, 10}, []int64{50, 40, 20})
	dry, err := MakePlan(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(mem.Objects(), before) {
		t.Fatal("planning changed the bucket")
	}
	if !slices.Equal(dry.Kept, []int64{50, 40, 20}) || !slices.Equal(dry.Pruned, []int64{30, 10}) {
		t.Fatalf("kept %v pruned %v", dry.Kept, dry.Pruned)
	}
	// Step 30's weights go, and step 10's when not packed with the frozen
	// file (step 10's, which every step references): what the pruned
	// steps name and the kept ones do not.
	if len(unref) == 0 || !slices.Equal(sorted(dry.Objects), unref) {
		t.Fatalf("objects to delete: %v; want %v", dry.Objects, unref)
	}
	done, err := Prune(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(dry.Deleted(), done.Deleted()) {
		t.Fatalf("dry run %v\nreal run %v", dry.Deleted(), done.Deleted())
	}
	var gone []string
	after := mem.Objects()
	for _, k := range before {
		if !slices.Contains(after, k) {
			gone = append(gone, k)
		}
	}
	if !slices.Equal(gone, sorted(done.Deleted())) {
		t.Fatalf("deleted %v, plan said %v", gone, done.Deleted())
	}
	if !slices.Equal(steps(t, mem), []int64{50, 40, 20}) {
		t.Fatalf("steps after prune: %v", steps(t, mem))
	}
	verifyRestores(t, mem, 50, 40, 20)
	// Nothing left to do.
	again, err := MakePlan(ctx, opts)
	if err != nil || len(again.Deleted()) != 0 {
		t.Fatalf("second plan: %v %v", again.Deleted(), err)
	}
}

// unreferenced returns, sorted, the objects the manifests of steps pruned
// name and none of kept's do: what pruning them frees. Counting files
// instead would be wrong wherever the uploader packs small files together.
func unreferenced(t *testing.T, st store.Store, pruned, kept []int64) []string {
	t.Helper()
	keys := func(steps []int64) map[string]bool {
		out := map[string]bool{}
		for _, s := range steps {
			m, err := remote.Get(context.Background(), st, prefix, s)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range m.Files {
				out[f.Key] = true
			}
		}
		return out
	}
	keep := keys(kept)
	var out []string
	for k := range keys(pruned) {
		if !keep[k] {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// TestPruneGrace: with the default grace, a pruned manifest's objects stay
// (its tombstone protects them) until the tombstone is older than MinAge;
// unreferenced objects of an upload in flight stay until they are.
func TestPruneGrace(t *testing.T) {
	ctx := context.Background()
	mem := store.NewMemStore()
	history(t, mem)
	// An upload in flight: an object written, no manifest yet.
	inflight := manifest.DataKey(prefix, 60, "att", "weights.bin")
	if _, err := mem.Put(ctx, inflight, bytes.NewReader([]byte("x")), 1, store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	unref := unreferenced(t, mem, []int64{40, 30, 20, 10}, []int64{50})
	now := time.Now()
	opts := Options{Store: mem, Prefix: prefix, Policy: Policy{KeepLast: 1}, Now: func() time.Time { return now }}
	p, err := Prune(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Pruned) != 4 || len(p.Objects) != 0 || len(p.Tombstones) != 4 {
		t.Fatalf("first prune: %+v", p)
	}
	// The pruned steps still restore from their tombstones' objects.
	m, _ := remote.Get(ctx, mem, prefix, 50)
	for _, f := range m.Files {
		if _, err := mem.Head(ctx, f.Key); err != nil {
			t.Fatal(err)
		}
	}
	now = now.Add(DefaultMinAge + time.Minute)
	p, err = Prune(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	// Steps 10..40's weights and the in-flight object, now stale.
	if !slices.Equal(sorted(p.Objects), sorted(append(unref, inflight))) || len(p.ExpiredTombstones) != 4 {
		t.Fatalf("second prune: objects %v tombstones %v", p.Objects, p.ExpiredTombstones)
	}
	verifyRestores(t, mem, 50)
}

// TestPruneDuringDedupPush: a push of step 60 reads step 50's manifest to
// deduplicate; before it commits, step 70 (other content) is committed and
// a keep-last-1 prune removes step 50. Step 60 must still commit whole.
func TestPruneDuringDedupPush(t *testing.T) {
	ctx := context.Background()
	mem := store.NewMemStore()
	dir := history(t, mem)
	other := t.TempDir()
	write(t, filepath.Join(other, "frozen.bin"), 1000, 2)
	write(t, filepath.Join(other, "weights.bin"), 500, 3)
	var once bool
	st := &store.Faulty{Inner: mem, Before: func(op, key string) error {
		if op == "Put" && key == manifest.ManifestKey(prefix, 60) && !once {
			once = true
			pushDir(t, mem, other, 70, func(o *pushCase) { o.NoDedup = true })
			if _, err := Prune(ctx, Options{Store: mem, Prefix: prefix, Policy: Policy{KeepLast: 1}}); err != nil {
				return err
			}
			if got := steps(t, mem); !slices.Equal(got, []int64{70}) {
				return fmt.Errorf("steps after prune: %v", got)
			}
		}
		return nil
	}}
	res := pushDir(t, st, dir, 60, nil)
	if res.Stats.DedupFiles != 2 {
		t.Fatalf("push of step 60 deduplicated %d files, want 2", res.Stats.DedupFiles)
	}
	verifyRestores(t, mem, 60, 70)
}

func TestPruneNodePartsAndUploads(t *testing.T) {
	ctx := context.Background()
	mem := store.NewMemStore()
	history(t, mem)
	// Node 0 of 2 wrote its part of step 60; node 1 never did.
	node0 := t.TempDir()
	write(t, filepath.Join(node0, "rank0.pt"), 300, 9)
	res := pushDir(t, mem, node0, 60, func(o *pushCase) { o.Nodes, o.NodeRank = 2, 0 })
	if !res.Pending {
		t.Fatal("step 60 committed with one node of two")
	}
	// Node 1's object, uploaded but its part not written yet.
	node1obj := manifest.DataKey(prefix, 60, "n1", "rank1.pt")
	if _, err := mem.Put(ctx, node1obj, bytes.NewReader([]byte("y")), 1, store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := mem.CreateMultipart(ctx, manifest.DataKey(prefix, 60, "n1", "big.pt")); err != nil {
		t.Fatal(err)
	}
	// A node that claimed the merge and died: the claim goes with the parts.
	claim := manifest.ClaimKey(prefix, manifest.PartSet{Step: 60, Nodes: 2})
	if _, err := mem.Put(ctx, claim, bytes.NewReader([]byte(`{"step":60}`)), 11, store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	now := time.Now().Add(2 * DefaultMinAge)
	opts := Options{Store: mem, Prefix: prefix, Policy: Policy{KeepLast: 5}, Now: func() time.Time { return now }}
	p, err := MakePlan(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Objects) != 0 || len(p.Parts) != 0 || len(p.Uploads) != 0 {
		t.Fatalf("an uncommitted step's files were planned for deletion past the grace: %+v", p)
	}
	now = time.Now().Add(DefaultAbandonedAfter + time.Hour)
	p, err = Prune(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Parts) != 2 || !slices.Contains(p.Parts, claim) || len(p.Uploads) != 1 || len(p.Objects) != 2 || !slices.Contains(p.Objects, node1obj) {
		t.Fatalf("abandoned step: parts %v uploads %v objects %v", p.Parts, p.Uploads, p.Objects)
	}
	for _, k := range mem.Objects() {
		if strings.HasPrefix(k, manifest.PartsPrefix(prefix)) {
			t.Fatalf("left after prune: %s", k)
		}
	}
	if ups, _ := mem.ListUploads(ctx, ""); len(ups) != 0 {
		t.Fatalf("uploads left: %v", ups)
	}
	verifyRestores(t, mem, 10, 20, 30, 40, 50)
}

func TestPruneRefusesUnreadableManifest(t *testing.T) {
	ctx := context.Background()
	mem := store.NewMemStore()
	history(t, mem)
	key := manifest.ManifestKey(prefix, 10)
	if _, err := mem.Put(ctx, key, bytes.NewReader([]byte("{")), 1, store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	before := mem.Objects()
	_, err := Prune(ctx, Options{Store: mem, Prefix: prefix, Policy: Policy{KeepLast: 1}, MinAge: -1})
	if err == nil || !slices.Equal(before, mem.Objects()) {
		t.Fatalf("prune with an unreadable manifest: %v", err)
	}
	if _, err := Prune(ctx, Options{Store: mem, Prefix: prefix, Policy: Policy{KeepLast: 0}}); err == nil {
		t.Fatal("keep-last 0 accepted")
	}
}

// TestPruneShardedManifests: with every manifest sharded, prune keeps the
// shards and files of kept steps (they still restore) and, past the grace
// period, deletes those of pruned steps.
func TestPruneShardedManifests(t *testing.T) {
	defer manifest.SetShardThresholds(1, 1)()
	ctx := context.Background()
	mem := store.NewMemStore()
	history(t, mem)
	m, err := remote.Get(ctx, mem, prefix, 50)
	if err != nil || !m.Sharded() {
		t.Fatalf("step 50 not sharded: %v", err)
	}
	old, err := remote.Get(ctx, mem, prefix, 10)
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{Store: mem, Prefix: prefix, Policy: Policy{KeepLast: 2}}
	if _, err := Prune(ctx, opts); err != nil {
		t.Fatal(err)
	}
	verifyRestores(t, mem, 40, 50)
	later := time.Now().Add(2 * DefaultMinAge)
	opts.Now = func() time.Time { return later }
	p, err := Prune(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	verifyRestores(t, mem, 40, 50)
	// Every object left is a file or shard of a kept step.
	keep := map[string]bool{}
	for _, s := range []int64{40, 50} {
		km, err := remote.Get(ctx, mem, prefix, s)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range km.Files {
			keep[f.Key] = true
		}
		for _, sh := range km.Shards {
			keep[sh.Key] = true
		}
	}
	for _, k := range mem.Objects() {
		if strings.HasPrefix(k, manifest.DataPrefix(prefix)) && !keep[k] {
			t.Errorf("left after the grace period: %s", k)
		}
	}
	for _, sh := range old.Shards {
		if !slices.Contains(p.Objects, sh.Key) {
			t.Errorf("shard %s of pruned step 10 not deleted", sh.Key)
		}
	}
	if len(p.Objects) == 0 {
		t.Fatal("nothing deleted after the grace period")
	}
}

// TestPruneKeepsNewestRestorable: with the newest two steps recorded
// damaged, prune --keep-last 1 keeps them and step 30, the newest
// restorable one (before, it kept step 50 alone and deleted 30's objects).
func TestPruneKeepsNewestRestorable(t *testing.T) {
	ctx := context.Background()
	mem := store.NewMemStore()
	history(t, mem)
	for _, s := range []int64{50, 40} {
		if _, err := remote.RecordDamage(ctx, mem, prefix, remote.Damage{Step: s, Reason: "test"}); err != nil {
			t.Fatal(err)
		}
	}
	p, err := Prune(ctx, Options{Store: mem, Prefix: prefix, Policy: Policy{KeepLast: 1}, MinAge: -1})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(p.Kept, []int64{50, 40, 30}) || !slices.Equal(steps(t, mem), []int64{50, 40, 30}) {
		t.Errorf("kept %v, bucket holds %v; want 50, 40 (damaged) and 30", p.Kept, steps(t, mem))
	}
	verifyRestores(t, mem, 30)
}
