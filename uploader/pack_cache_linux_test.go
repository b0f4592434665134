//go:build linux

package uploader

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ferrylabs/ferry/internal/pagecache"
	"github.com/ferrylabs/ferry/internal/store"
)

// With DropCache (the agent), packed files that were not in the page cache
// before the push are not left there by the pack's reads; without it they
// are (so the test can fail).
func TestPackLeavesThePageCache(t *testing.T) {
	for _, drop := range []bool{true, false} {
		t.Run(fmt.Sprint("drop=", drop), func(t *testing.T) {
			dir := t.TempDir()
			var files []File
			for i := range 8 {
				path := filepath.Join(dir, fmt.Sprint(i))
				writeRandom(t, path, 256<<10, int64(i+1))
				evict(t, path)
				files = append(files, File{LocalPath: path, RelPath: fmt.Sprint(i), Key: "run/data/x/" + fmt.Sprint(i)})
			}
			up := New(Options{Store: store.NewMemStore(), DropCache: drop, PackKey: func(n string) string { return "run/data/x.pack-" + n }})
			entries, err := up.Upload(context.Background(), files)
			if err != nil {
				t.Fatal(err)
			}
			cached := 0
			for i, f := range files {
				if !entries[i].Packed() {
					t.Fatalf("%s not packed", f.RelPath)
				}
				fh, err := os.Open(f.LocalPath)
				if err != nil {
					t.Fatal(err)
				}
				n, _, err := pagecache.Cached(fh, 256<<10)
				fh.Close()
				if err != nil {
					t.Fatal(err)
				}
				cached += n
			}
			if drop && cached != 0 || !drop && cached == 0 {
				t.Fatalf("drop=%v: %d pages of the packed files cached after the push", drop, cached)
			}
		})
	}
}

// evict writes path back and drops it from the page cache.
func evict(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
}
