package prune

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/manifest"
)

// TestPruneLaterSaysWhenGraceEnds: a keep-last-1 prune deletes 0 objects
// and its Plan.Later says exactly which it leaves to the grace period: the
// pruned steps' unshared objects (until its tombstones are MinAge old) and
// an in-flight object (until it is); a plan an hour later dates them from
// the tombstones' writing, not from its own now; a prune after MinAge
// deletes exactly those objects and defers nothing.
func TestPruneLaterSaysWhenGraceEnds(t *testing.T) {
	ctx := context.Background()
	mem := store.NewMemStore()
	history(t, mem)
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
	if len(p.Objects) != 0 || len(p.Later) != 2 {
		t.Fatalf("first prune: objects %v later %+v", p.Objects, p.Later)
	}
	pruned, young := p.Later[0], p.Later[1]
	if pruned.Why != LaterPruned || pruned.Objects != len(unref) || !pruned.From.Equal(now.Add(DefaultMinAge)) {
		t.Errorf("pruned group %+v, want %d objects from %v", pruned, len(unref), now.Add(DefaultMinAge))
	}
	if young.Why != LaterUnreferenced || young.Objects != 1 || young.Bytes != 1 {
		t.Errorf("unreferenced group %+v", young)
	}
	first := pruned.From
	now = now.Add(time.Hour)
	p, err = MakePlan(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Later) != 2 || p.Later[0].Objects != len(unref) || p.Later[0].From.Sub(first).Abs() > time.Second {
		t.Errorf("an hour later: %+v, want the tombstones' own end, about %v", p.Later, first)
	}
	now = now.Add(DefaultMinAge)
	p, err = Prune(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Objects) != len(unref)+1 || len(p.Later) != 0 {
		t.Errorf("after the grace: objects %d (want %d), later %+v", len(p.Objects), len(unref)+1, p.Later)
	}
}
