package prune

import (
	"bytes"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/internal/remote"
	"github.com/ferrylabs/ferry/internal/s3test"
	"github.com/ferrylabs/ferry/internal/steptest"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/internal/verify"
	"github.com/ferrylabs/ferry/manifest"
)

func TestMain(m *testing.M) { s3test.Main(m) }

// putPack writes the contents, concatenated, as pack name of step's push
// attempt "att", as a format 3 writer does (by hand: the uploader does not
// pack yet), and returns the files that name it.
func putPack(t *testing.T, st store.Store, step int64, name string, paths ...string) []manifest.File {
	t.Helper()
	key := manifest.PackKey(prefix, step, "att", name)
	members := make([]steptest.File, len(paths))
	for i, p := range paths {
		members[i] = steptest.File{Path: p, Data: bytes.Repeat([]byte{byte(step), byte(i)}, 50+i)}
	}
	files, pack := steptest.Pack(key, 0, members...)
	steptest.Put(t, st, key, pack)
	return files
}

func commitFiles(t *testing.T, st store.Store, step int64, files ...manifest.File) {
	t.Helper()
	m := &manifest.Manifest{Format: manifest.FormatVersion, Step: step, Created: time.Now().UTC(), Files: files}
	if _, ok, err := remote.Commit(t.Context(), st, prefix, m); err != nil || !ok {
		t.Fatalf("commit step %d: committed %v, %v", step, ok, err)
	}
}

// packedHistory commits steps 10, 20 and 30 of packed files: step 20
// reuses two of the three files of step 10's pack (deduplicated: its
// manifest names that pack) and packs its third; step 30 has a pack of
// its own. It returns the three packs' keys.
func packedHistory(t *testing.T, st store.Store) (p10, p20, p30 string) {
	t.Helper()
	f10 := putPack(t, st, 10, "p", "a.json", "b.json", "c.json")
	commitFiles(t, st, 10, f10...)
	f20 := putPack(t, st, 20, "p", "c.json")
	commitFiles(t, st, 20, f10[0], f10[1], f20[0])
	f30 := putPack(t, st, 30, "p", "a.json", "b.json", "c.json")
	commitFiles(t, st, 30, f30...)
	return f10[0].Key, f20[0].Key, f30[0].Key
}

// exists reports whether key is in the bucket.
func exists(t *testing.T, st store.Store, key string) bool {
	t.Helper()
	_, err := st.Head(t.Context(), key)
	if err != nil && !errors.Is(err, store.ErrNotExist) {
		t.Fatal(err)
	}
	return err == nil
}

// checkPrune checks what a prune deleted: exactly objects, each once,
// and that they are gone while keep are still there.
func checkPrune(t *testing.T, st store.Store, p *Plan, objects, keep []string) {
	t.Helper()
	if got := sorted(p.Objects); !slices.Equal(got, sorted(objects)) {
		t.Fatalf("objects deleted: %v; want %v", got, sorted(objects))
	}
	if d := p.Deleted(); len(slices.Compact(sorted(d))) != len(d) {
		t.Errorf("a key planned for deletion twice: %v", d)
	}
	for _, k := range objects {
		if exists(t, st, k) {
			t.Errorf("%s still there after prune", k)
		}
	}
	for _, k := range keep {
		if !exists(t, st, k) {
			t.Errorf("%s deleted, yet a kept step references it", k)
		}
	}
}

// A pack stays while a kept step's manifest names it, even when the step
// that wrote it is pruned, and is deleted, once, when no kept step names
// it any more.
func TestPrunePacks(t *testing.T) {
	srv := s3test.Shared(t)
	st := srv.Store(t, srv.NewBucket(t))
	p10, p20, p30 := packedHistory(t, st)
	p, err := Prune(t.Context(), Options{Store: st, Prefix: prefix, Policy: Policy{KeepLast: 2}, MinAge: -1})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(p.Pruned, []int64{10}) {
		t.Fatalf("pruned %v, want [10]", p.Pruned)
	}
	checkPrune(t, st, p, nil, []string{p10, p20, p30})
	p, err = Prune(t.Context(), Options{Store: st, Prefix: prefix, Policy: Policy{KeepLast: 1}, MinAge: -1})
	if err != nil {
		t.Fatal(err)
	}
	checkPrune(t, st, p, []string{p10, p20}, []string{p30})
	reps, err := verify.Verify(t.Context(), verify.Options{Store: st, Prefix: prefix, Steps: []int64{30}, ReadShare: 1})
	if err != nil || !reps[0].OK() || reps[0].FilesRead != 3 {
		t.Fatalf("kept step 30 after prune: %+v, %v", reps, err)
	}
}

// With the grace period, the tombstones of pruned steps keep their packs
// until they expire; then each pack no kept step names is deleted once.
func TestPrunePacksGrace(t *testing.T) {
	srv := s3test.Shared(t)
	st := srv.Store(t, srv.NewBucket(t))
	p10, p20, p30 := packedHistory(t, st)
	now := time.Now()
	opts := Options{Store: st, Prefix: prefix, Policy: Policy{KeepLast: 1}, Now: func() time.Time { return now }}
	p, err := Prune(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Tombstones) != 2 {
		t.Fatalf("tombstones %v; want steps 20 and 10's", p.Tombstones)
	}
	checkPrune(t, st, p, nil, []string{p10, p20, p30})
	now = now.Add(DefaultMinAge + time.Minute)
	if p, err = Prune(t.Context(), opts); err != nil {
		t.Fatal(err)
	}
	checkPrune(t, st, p, []string{p10, p20}, []string{p30})
	if len(p.ExpiredTombstones) != 2 {
		t.Errorf("expired tombstones %v; want 2", p.ExpiredTombstones)
	}
}

// A pack's key is of its step, like the keys of the attempt's folder: the
// packs of a step whose node parts are live stay with its files.
func TestStepOfPackKey(t *testing.T) {
	key := manifest.PackKey(prefix, 20, "att", "0123abcd")
	if step, ok := manifest.StepFromDataKey(prefix, key); !ok || step != 20 {
		t.Fatalf("StepFromDataKey(%s) = %d, %v; want 20", key, step, ok)
	}
}
