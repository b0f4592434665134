package restore

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/manifest"
)

func TestTempNames(t *testing.T) {
	for _, base := range []string{"rank0.pt", ".hidden", "x.ferry-0123456789abcdef.tmp", strings.Repeat("é", 127) + "x", strings.Repeat("n", 255)} {
		name := tempName(base)
		if len(name) > maxNameLen {
			t.Errorf("temp name of a %d-byte name is %d bytes", len(base), len(name))
		}
		got := tempOf(name)
		if !madeFor(got, map[string]bool{base: true}) || !strings.HasPrefix(base, got) {
			t.Errorf("tempOf(%q) = %q, not recognised as made for %q", name, got, base)
		}
	}
	for _, name := range []string{"rank0.pt", ".rank0.pt.tmp", ".rank0.pt.ferry-0123.tmp", ".rank0.pt.ferry-0123456789ABCDEF.tmp", "..ferry-0123456789abcdef.tmp"} {
		if got := tempOf(name); got != "" {
			t.Errorf("tempOf(%q) = %q, want not ours", name, got)
		}
	}
	if madeFor("rank", map[string]bool{"rank0.pt": true}) {
		t.Error("a short temp base matched a longer name by prefix")
	}
}

// Temp files an interrupted restore left are removed; look-alikes made for
// names the manifest does not have, and user files, stay.
func TestStaleTempsRemoved(t *testing.T) {
	st := store.NewMemStore()
	commit(t, st, 1, []tfile{{path: "rank0.pt", data: []byte("zero")}, {path: "sub/rank1.pt", data: []byte("one")}}, nil)
	dir := t.TempDir()
	stale := []string{".rank0.pt.ferry-0123456789abcdef.tmp", "sub/.rank1.pt.ferry-fedcba9876543210.tmp"}
	keep := []string{".notours.ferry-0123456789abcdef.tmp", "rank0.pt.bak", "sub/.rank1.pt.swp"}
	for _, p := range append(stale, keep...) {
		writeFile(t, filepath.Join(dir, p), []byte("partial"))
	}
	if _, err := Restore(context.Background(), Options{Store: st, Prefix: testPrefix, Dir: dir, Step: 1}); err != nil {
		t.Fatal(err)
	}
	for _, p := range stale {
		assertAbsent(t, filepath.Join(dir, p))
	}
	for _, p := range keep {
		assertFile(t, filepath.Join(dir, p), []byte("partial"))
	}
}

func TestLinksReplacedAfterFiles(t *testing.T) {
	st := store.NewMemStore()
	commit(t, st, 2, []tfile{{path: "ep2.pt", data: []byte("two")}, {path: "r/ep2.pt", data: []byte("r2")}},
		[]manifest.Symlink{{Path: "latest.pt", Target: "ep2.pt"}, {Path: "same", Target: "ep2.pt"}, {Path: "r/latest", Target: "ep2.pt"}, {Path: "new/dir/link", Target: "../../r"}})
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "ep1.pt"), []byte("one"))
	os.Symlink("ep1.pt", filepath.Join(dir, "latest.pt"))
	os.Symlink("ep2.pt", filepath.Join(dir, "same"))
	res, err := Restore(context.Background(), Options{Store: st, Prefix: testPrefix, Dir: dir, Step: 2})
	if err != nil {
		t.Fatal(err)
	}
	got := tree(t, dir)
	want := []string{"ep1.pt", "ep2.pt", "latest.pt@ep2.pt", "new/", "new/dir/", "new/dir/link@../../r", "r/", "r/ep2.pt", "r/latest@ep2.pt", "same@ep2.pt"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("target holds\n%v\nwant\n%v", got, want)
	}
	if res.Symlinks != 4 {
		t.Errorf("result %+v", res)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "new/dir/link/latest")); err != nil || string(b) != "r2" {
		t.Errorf("links do not resolve: %q, %v", b, err)
	}
	assertNoTemps(t, dir)
}
