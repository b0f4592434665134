package restore

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/manifest"
)

// Hostile manifests, stored without Commit's validation: the decoder
// rejects them when Restore reads them, naming the field, and nothing is
// written.
func TestRestoreRejectsHostileManifest(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files []string
		links []manifest.Symlink
		want  string
	}{
		{"dotdot", []string{"ok", "../x"}, nil, "files[1].path"},
		{"absolute", []string{"/tmp/x"}, nil, "files[0].path"},
		{"duplicate", []string{"a/x", "a/x"}, nil, "files[1].path"},
		{"link escapes", []string{"f"}, []manifest.Symlink{{Path: "l", Target: "../../etc"}}, "symlinks[0].target"},
		{"absolute link", []string{"f"}, []manifest.Symlink{{Path: "l", Target: "/etc"}}, "symlinks[0].target"},
		{"file through link", []string{"d/x"}, []manifest.Symlink{{Path: "d", Target: "elsewhere"}}, "files[0].path"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := store.NewMemStore()
			m := &manifest.Manifest{Format: manifest.FormatVersion, Step: 9, Created: time.Now().UTC(), Symlinks: tc.links}
			for _, p := range tc.files {
				key := manifest.DataKey(testPrefix, 9, "a1", "obj")
				overwrite(t, st, key, []byte("x"))
				m.Files = append(m.Files, manifest.File{Path: p, Size: 1, BLAKE3: b3([]byte("x")), Key: key})
			}
			putRawManifest(t, st, m)
			dir := filepath.Join(t.TempDir(), "target")
			_, err := Restore(context.Background(), Options{Store: st, Prefix: testPrefix, Dir: dir, Step: LatestStep})
			if err == nil || !strings.Contains(err.Error(), "manifest field "+tc.want) {
				t.Fatalf("got %v, want an error naming %s", err, tc.want)
			}
			assertAbsent(t, dir)
		})
	}
}

// Links that pass the decoder one by one but escape together are rejected
// by the planner before anything is written.
func TestRestoreRejectsLinkChainEscape(t *testing.T) {
	st := store.NewMemStore()
	commit(t, st, 1, []tfile{{path: "r/f", data: []byte("f")}}, []manifest.Symlink{
		{Path: "p/q/l", Target: "../../r"},
		{Path: "p/q/e", Target: "l/../.."},
	})
	dir := filepath.Join(t.TempDir(), "target")
	_, err := Restore(context.Background(), Options{Store: st, Prefix: testPrefix, Dir: dir, Step: 1})
	want := `restore step 1: p/q/e: link target "l/../.." resolves outside the target directory`
	if err == nil || err.Error() != want {
		t.Fatalf("got %v\nwant %s", err, want)
	}
	assertAbsent(t, dir)
}

func TestRestoreRejectsExistingLinkOutside(t *testing.T) {
	st := store.NewMemStore()
	commit(t, st, 1, []tfile{{path: "a.pt", data: []byte("a")}, {path: "sub/x", data: []byte("x")}}, nil)
	dir, elsewhere := t.TempDir(), t.TempDir()
	if err := os.Symlink(elsewhere, filepath.Join(dir, "sub")); err != nil {
		t.Fatal(err)
	}
	_, err := Restore(context.Background(), Options{Store: st, Prefix: testPrefix, Dir: dir, Step: 1})
	want := fmt.Sprintf("restore step 1: sub/x: parent directory resolves outside the target directory: sub is a symlink to %s", elsewhere)
	if err == nil || err.Error() != want {
		t.Fatalf("got %v\nwant %s", err, want)
	}
	if got := tree(t, dir); fmt.Sprint(got) != "[sub@"+elsewhere+"]" {
		t.Errorf("target holds %v", got)
	}
	if got := tree(t, elsewhere); len(got) != 0 {
		t.Errorf("written outside the target: %v", got)
	}
}

// An existing link inside the target directory is followed: the file lands
// in the directory it points to, and the link stays.
func TestRestoreThroughExistingLinkInside(t *testing.T) {
	st := store.NewMemStore()
	commit(t, st, 1, []tfile{{path: "sub/x", data: []byte("x")}}, nil)
	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, "real"), 0o755)
	os.Symlink("real", filepath.Join(dir, "sub"))
	if _, err := Restore(context.Background(), Options{Store: st, Prefix: testPrefix, Dir: dir, Step: 1}); err != nil {
		t.Fatal(err)
	}
	if got := tree(t, dir); fmt.Sprint(got) != "[real/ real/x sub@real]" {
		t.Errorf("target holds %v", got)
	}
	assertFile(t, filepath.Join(dir, "real/x"), []byte("x"))
}

// A directory swapped for a symlink between planning and writing (another
// local process) cannot carry the writes outside: they go through an
// os.Root of the target.
func TestRestoreSwapAfterPlan(t *testing.T) {
	st := store.NewMemStore()
	m := commit(t, st, 1, []tfile{{path: "sub/x", data: []byte("x")}}, nil)
	dir, elsewhere := t.TempDir(), t.TempDir()
	os.Mkdir(filepath.Join(dir, "sub"), 0o755)
	p, err := makePlan(m, dir, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(dir, "sub"))
	os.Symlink(elsewhere, filepath.Join(dir, "sub"))
	opts := Options{Store: st, Prefix: testPrefix, Dir: dir, Concurrency: 2, ChunkSize: mib, Logger: zap.NewNop()}
	err = newRestorer(opts, p, false).run(context.Background(), p)
	if err == nil || !strings.Contains(err.Error(), "path escapes from parent") {
		t.Fatalf("got %v, want the write refused", err)
	}
	if got := tree(t, elsewhere); len(got) != 0 {
		t.Errorf("written outside the target: %v", got)
	}
}
