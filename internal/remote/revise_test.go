package remote

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/manifest"
)

// withFile returns a copy of m with one more file.
func withFile(m *manifest.Manifest, p string) *manifest.Manifest {
	c := *m
	c.Files = append(append([]manifest.File(nil), m.Files...), manifest.File{Path: p, Size: 1, BLAKE3: strings.Repeat("b", 64), Key: "run/data/000000001000/y/" + p})
	return &c
}

func TestReviseReplacesTheCommittedVersion(t *testing.T) {
	ctx := t.Context()
	st := store.NewMemStore()
	early := valid()
	if _, committed, err := Commit(ctx, st, "run", early); err != nil || !committed {
		t.Fatalf("commit: %v %v", committed, err)
	}
	full := withFile(valid(), "optim.pt")
	got, wrote, err := Revise(ctx, st, "run", 1000, func(*manifest.Manifest) (*manifest.Manifest, error) { return full, nil })
	if err != nil || !wrote || got.Revision != 1 {
		t.Fatalf("revise: wrote %v, revision %d, %v", wrote, got.Revision, err)
	}
	m, err := Get(ctx, st, "run", 1000)
	if err != nil || !manifest.SameContent(m, full) || m.Revision != 1 {
		t.Fatalf("get after revise: %+v %v", m, err)
	}
	if latest, err := Latest(ctx, st, "run"); err != nil || latest.Revision != 1 {
		t.Fatalf("latest after revise: %+v %v", latest, err)
	}
	// The same content again writes nothing.
	if _, wrote, err := Revise(ctx, st, "run", 1000, func(*manifest.Manifest) (*manifest.Manifest, error) { return withFile(valid(), "optim.pt"), nil }); err != nil || wrote {
		t.Fatalf("revise to the same content: wrote %v, %v", wrote, err)
	}
	if _, _, err := Revise(ctx, st, "run", 7, func(c *manifest.Manifest) (*manifest.Manifest, error) { return c, nil }); !errors.Is(err, ErrNoCheckpoint) {
		t.Fatalf("revise of an uncommitted step: %v, want ErrNoCheckpoint", err)
	}
}

// Nodes revising their own files of one step at once: every node's change
// lands, none overwrites another's (If-Match, read again, apply again).
func TestReviseConcurrentWritersAllLand(t *testing.T) {
	ctx := t.Context()
	st := store.NewMemStore()
	if _, _, err := Commit(ctx, st, "run", valid()); err != nil {
		t.Fatal(err)
	}
	const writers = 8
	var wg sync.WaitGroup
	errs := make([]error, writers)
	for i := range writers {
		wg.Go(func() {
			_, _, errs[i] = Revise(ctx, st, "run", 1000, func(cur *manifest.Manifest) (*manifest.Manifest, error) {
				return withFile(cur, fmt.Sprintf("node-%d.pt", i)), nil
			})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("writer %d: %v", i, err)
		}
	}
	m, err := Get(ctx, st, "run", 1000)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Files) != len(valid().Files)+writers || m.Revision != writers {
		t.Fatalf("after %d revisions: %d files, revision %d", writers, len(m.Files), m.Revision)
	}
}

// A revision too big for one document is written sharded, and reads back.
func TestReviseSharded(t *testing.T) {
	defer manifest.SetShardThresholds(500, 2)()
	ctx := t.Context()
	st := store.NewMemStore()
	if _, _, err := Commit(ctx, st, "run", valid()); err != nil {
		t.Fatal(err)
	}
	full := withFile(withFile(valid(), "a.pt"), "b.pt")
	if _, _, err := Revise(ctx, st, "run", 1000, func(*manifest.Manifest) (*manifest.Manifest, error) { return full, nil }); err != nil {
		t.Fatal(err)
	}
	m, err := Get(ctx, st, "run", 1000)
	if err != nil || !m.Sharded() || !manifest.SameContent(m, full) || m.Revision != 1 {
		t.Fatalf("sharded revision: %+v %v", m, err)
	}
}
