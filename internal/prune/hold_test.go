package prune

import (
	"context"
	"slices"
	"testing"

	"github.com/ferrylabs/ferry/internal/store"
)

// A held step (the agent's step declared ahead of every saved one) is
// kept and does not count towards KeepLast: with steps 10..50, 50 held
// and KeepLast 1, step 40 (the newest counted) stays beside it; with 50
// and 40 held, 30 does. Old code had no Hold: 50 took KeepLast's place.
func TestPruneHoldKeepsAndDoesNotCount(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		hold         []int64
		kept, pruned []int64
	}{
		{[]int64{50}, []int64{50, 40}, []int64{30, 20, 10}},
		{[]int64{50, 40}, []int64{50, 40, 30}, []int64{20, 10}},
		{[]int64{50, 40, 30, 20, 10, 99}, []int64{50, 40, 30, 20, 10}, nil},
	} {
		mem := store.NewMemStore()
		history(t, mem)
		hold := map[int64]bool{}
		for _, s := range c.hold {
			hold[s] = true
		}
		p, err := Prune(ctx, Options{Store: mem, Prefix: prefix, Policy: Policy{KeepLast: 1}, Hold: hold, MinAge: -1})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(p.Kept, c.kept) || !slices.Equal(p.Pruned, c.pruned) {
			t.Errorf("hold %v: kept %v pruned %v; want kept %v pruned %v", c.hold, p.Kept, p.Pruned, c.kept, c.pruned)
		}
		if got := steps(t, mem); !slices.Equal(got, c.kept) {
			t.Errorf("hold %v: steps in the bucket %v; want %v", c.hold, got, c.kept)
		}
		verifyRestores(t, mem, c.kept...)
	}
}
