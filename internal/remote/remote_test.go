package remote

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/manifest"
)

var hashA = strings.Repeat("a", 64)

func valid() *manifest.Manifest {
	r0 := 0
	return &manifest.Manifest{
		Format:  manifest.FormatVersion,
		Step:    1000,
		Created: time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC),
		Files: []manifest.File{
			{Path: "ep0-ba1000-rank0.pt", Size: 10, BLAKE3: hashA, Key: "run/data/000000001000/x/ep0-ba1000-rank0.pt", Rank: &r0},
			{Path: "sub/big.bin", Size: 20 << 20, BLAKE3: hashA, Key: "run/data/000000001000/x/sub/big.bin", PartSize: 8 << 20},
		},
		Symlinks: []manifest.Symlink{{Path: "latest-rank0.pt", Target: "ep0-ba1000-rank0.pt"}},
	}
}

func TestCommitLatestAndConflicts(t *testing.T) {
	ctx := context.Background()
	st := store.NewMemStore()
	if _, err := Latest(ctx, st, "run"); !errors.Is(err, ErrNoCheckpoint) {
		t.Fatalf("Latest on empty = %v", err)
	}
	for _, step := range []int64{5, 1000, 40} {
		m := valid()
		m.Step = step
		if _, committed, err := Commit(ctx, st, "run", m); err != nil || !committed {
			t.Fatalf("commit %d: %v %v", step, committed, err)
		}
	}
	latest, err := Latest(ctx, st, "run")
	if err != nil || latest.Step != 1000 {
		t.Fatalf("Latest = %v, %v; want step 1000", latest, err)
	}
	steps, _ := Steps(ctx, st, "run", 0)
	if len(steps) != 3 || steps[0] != 1000 || steps[2] != 5 {
		t.Fatalf("Steps = %v", steps)
	}
	// Same content again (other keys, other time): success, not committed.
	again := valid()
	again.Created = again.Created.Add(time.Hour)
	again.Files[0].Key = "run/data/000000001000/y/ep0-ba1000-rank0.pt"
	if _, committed, err := Commit(ctx, st, "run", again); err != nil || committed {
		t.Fatalf("identical re-commit: committed=%v err=%v", committed, err)
	}
	// Different content: ErrConflict, the stored manifest unchanged.
	diff := valid()
	diff.Files[0].BLAKE3 = strings.Repeat("b", 64)
	if _, _, err := Commit(ctx, st, "run", diff); !errors.Is(err, ErrConflict) {
		t.Fatalf("conflicting commit: %v", err)
	}
	got, _ := Get(ctx, st, "run", 1000)
	if got.Files[0].BLAKE3 != hashA {
		t.Fatal("a conflicting commit changed the manifest")
	}
	// Invalid manifests are never written.
	bad := valid()
	bad.Step = 7
	bad.Files[0].Path = "../x"
	if _, _, err := Commit(ctx, st, "run", bad); err == nil {
		t.Fatal("invalid manifest committed")
	}
	if _, err := Get(ctx, st, "run", 7); !errors.Is(err, ErrNoCheckpoint) {
		t.Fatalf("invalid manifest visible: %v", err)
	}
}

func TestGetChecksStepAgainstKey(t *testing.T) {
	ctx := context.Background()
	st := store.NewMemStore()
	m := valid()
	data, _ := manifest.Encode(m)
	// A manifest of step 1000 stored under step 2000's key.
	if _, err := st.Put(ctx, manifest.ManifestKey("run", 2000), strings.NewReader(string(data)), int64(len(data)), store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := Get(ctx, st, "run", 2000); err == nil || !strings.Contains(err.Error(), "field step") {
		t.Fatalf("mismatched step accepted: %v", err)
	}
}

func TestLatestSkipsStrayKeys(t *testing.T) {
	ctx := context.Background()
	st := store.NewMemStore()
	m := valid()
	if _, _, err := Commit(ctx, st, "run", m); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Put(ctx, "run/manifests/000-stray.txt", strings.NewReader("x"), 1, store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if step, err := LatestStep(ctx, st, "run"); err != nil || step != 1000 {
		t.Fatalf("LatestStep = %d, %v", step, err)
	}
}

func TestSummaries(t *testing.T) {
	ctx := context.Background()
	st := store.NewMemStore()
	for step := int64(1); step <= 5; step++ {
		m := &manifest.Manifest{Format: manifest.FormatVersion, Step: step * 10, Created: time.Date(2026, 12, 3, 0, 0, int(step), 0, time.UTC),
			Files: []manifest.File{{Path: "a.pt", Size: step, BLAKE3: hashA, Key: manifest.DataKey("run", step*10, "x", "a.pt")}}}
		if _, _, err := Commit(ctx, st, "run", m); err != nil {
			t.Fatal(err)
		}
	}
	all, err := Summaries(ctx, st, "run", 0)
	if err != nil || len(all) != 5 || all[0].Step != 10 || all[4].Step != 50 || all[4].Bytes != 5 || all[4].Files != 1 {
		t.Fatalf("all: %+v, %v", all, err)
	}
	last, err := Summaries(ctx, st, "run", 2)
	if err != nil || len(last) != 2 || last[0].Step != 40 || last[1].Step != 50 {
		t.Fatalf("last 2: %+v, %v", last, err)
	}
}
