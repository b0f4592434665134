//go:build linux

package pagecache

import (
	"io"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// A file half in the page cache is read whole: DropOthers drops the half
// the read pulled in and keeps the half that was there before.
func TestDropOthersKeepsWhatWasCached(t *testing.T) {
	const size = 8 << 20
	path := filepath.Join(t.TempDir(), "ckpt.pt")
	if err := os.WriteFile(path, make([]byte, size), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// Written data is dirty; write it back, then drop it all, then cache
	// the first half by reading it without readahead: a readahead still
	// in flight when Snapshot looks (1 run in 11 here, ext4 with large
	// folios) is recorded as a hole that its folio then fills, and a folio
	// partly cached before is, rightly, not dropped.
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fadvise(int(f.Fd()), 0, size, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_RANDOM); err != nil {
		t.Fatal(err)
	}
	if _, err := io.CopyN(io.Discard, f, size/2); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_NORMAL); err != nil { // the upload reads with readahead
		t.Fatal(err)
	}
	before, total, err := Cached(f, size)
	if err != nil {
		t.Fatal(err)
	}
	if before == 0 || before == total {
		t.Skipf("cannot set up a half-cached file here (%d of %d pages cached; tmpfs?)", before, total)
	}
	r, err := Snapshot(f, size)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, f); err != nil { // the upload's read
		t.Fatal(err)
	}
	if err := r.DropOthers(f); err != nil {
		t.Fatal(err)
	}
	after, _, err := Cached(f, size)
	if err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Errorf("%d pages cached after the read and DropOthers, want the %d cached before it", after, before)
	}
}
