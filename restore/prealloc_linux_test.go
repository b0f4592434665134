package restore

import (
	"bytes"
	"context"
	"io"
	"io/fs"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/manifest"
)

// TestHostileSizeNotPreallocated: a manifest claiming 256 MiB for an
// object of 1 MiB, restored with --fsync (which preallocates), reserves
// no such space before the object's length is known: while the first GET
// runs, the target holds no more than a few MiB, and the restore fails
// naming the file.
func TestHostileSizeNotPreallocated(t *testing.T) {
	dir := t.TempDir()
	inner := store.NewMemStore()
	data := randBytes(mib, 7)
	key := manifest.DataKey(testPrefix, 1, "a1", "big.pt")
	if _, err := inner.Put(context.Background(), key, bytes.NewReader(data), int64(len(data)), store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	putRawManifest(t, inner, &manifest.Manifest{Format: manifest.FormatVersion, Step: 1, Created: time.Now().UTC(),
		Files: []manifest.File{{Path: "big.pt", Size: 256 * mib, BLAKE3: b3(data), Key: key}}})
	var mu sync.Mutex
	var most int64
	st := &hookStore{Store: inner, body: func(_ string, _ int64, _ int, rc io.ReadCloser) io.ReadCloser {
		n := allocated(t, dir)
		mu.Lock()
		most = max(most, n)
		mu.Unlock()
		return rc
	}}
	_, err := Restore(context.Background(), Options{Store: st, Prefix: testPrefix, Dir: dir, Step: 1, ChunkSize: mib, Fsync: true})
	if err == nil || !strings.Contains(err.Error(), "big.pt") {
		t.Fatalf("restore of a file whose object is short: %v, want an error naming it", err)
	}
	if most > 8*mib {
		t.Errorf("%d MiB allocated in the target before the object's length was known", most/mib)
	}
}

// allocated sums the disk blocks of the regular files under dir.
func allocated(t *testing.T, dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		if fi, err := d.Info(); err == nil {
			n += fi.Sys().(*syscall.Stat_t).Blocks * 512
		}
		return nil
	})
	return n
}
