//go:build linux

package doctor

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// Issue 47 item 6: doctor's lease probe walked the watch dir, then opened
// the file it found by its full path, following a folder swapped for a
// link in between (1 run in 20 opened a file outside the watch dir). Here
// the folder step/ flips between a real folder holding a regular file and
// a link to a folder outside holding a file of the same name that the
// test keeps open for writing: a probe that says "open for writing" went
// outside. The old probe did; it now opens beneath the watch dir, no link
// followed.
func TestLeaseProbeFollowsNoLink(t *testing.T) {
	root := t.TempDir()
	watch, outside := filepath.Join(root, "watch"), filepath.Join(root, "outside")
	real, aside := filepath.Join(watch, "step"), filepath.Join(root, "aside")
	for _, d := range []string{real, outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(real, "a.bin"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	w, err := os.OpenFile(filepath.Join(outside, "a.bin"), os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Go(func() {
		for !stop.Load() {
			_ = os.Rename(real, aside)
			_ = os.Symlink(outside, real)
			_ = os.Remove(real)
			_ = os.Rename(aside, real)
		}
	})
	outsideSeen := 0
	for range 2000 {
		r := leaseCheck(watch, true)
		if strings.Contains(r.Detail, "open for writing right now") {
			outsideSeen++
		}
	}
	stop.Store(true)
	wg.Wait()
	if outsideSeen > 0 {
		t.Errorf("the lease probe opened the file outside the watch dir through a link %d times in 2000", outsideSeen)
	}
}
