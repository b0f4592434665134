package prune

import (
	"bytes"
	"context"
	"slices"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/internal/remote"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/manifest"
)

// The restore barrier's check-ins are deleted once older than the grace
// period, after the parts; younger ones (a restore may be waiting on them)
// stay, and so does an object under checkins/ that is not a check-in.
func TestPruneCheckins(t *testing.T) {
	ctx := context.Background()
	mem := store.NewMemStore()
	history(t, mem)
	set := manifest.PartSet{Step: 50, Nodes: 2, Run: "77.0"}
	for k := range 2 {
		if _, err := remote.CheckIn(ctx, mem, prefix, remote.Checkin{Step: 50, Run: "77.0", Nodes: 2, Node: k, At: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	stray := manifest.CheckinsPrefix(prefix) + "notes.txt"
	if _, err := mem.Put(ctx, stray, bytes.NewReader([]byte("x")), 1, store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	now := time.Now().Add(time.Hour)
	opts := Options{Store: mem, Prefix: prefix, Policy: Policy{KeepLast: 5}, Now: func() time.Time { return now }}
	p, err := Prune(ctx, opts)
	if err != nil || len(p.Checkins) != 0 {
		t.Fatalf("check-ins an hour old: %v, %v; want them kept for the grace period (%v)", p.Checkins, err, DefaultMinAge)
	}
	now = time.Now().Add(DefaultMinAge + time.Minute)
	if p, err = Prune(ctx, opts); err != nil {
		t.Fatal(err)
	}
	want := []string{manifest.RestoreCheckinKey(prefix, set, 0), manifest.RestoreCheckinKey(prefix, set, 1)}
	if !slices.Equal(p.Checkins, want) || !slices.Equal(p.Deleted()[len(p.Deleted())-2:], want) {
		t.Fatalf("deleted check-ins %v (all deleted %v); want %v, last", p.Checkins, p.Deleted(), want)
	}
	if in, err := remote.CheckedIn(ctx, mem, prefix, set); err != nil || slices.Contains(in, true) {
		t.Fatalf("check-ins left after prune: %v, %v", in, err)
	}
	if _, err := mem.Head(ctx, stray); err != nil {
		t.Errorf("prune deleted %s, which is no check-in: %v", stray, err)
	}
	verifyRestores(t, mem, 10, 20, 30, 40, 50)
}
