package restore

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/internal/store"
)

// A file already at a final path that becomes a FIFO between the look at
// it and its open (whoever can write --to swapped it) neither hangs the
// restore nor is kept: it is replaced by the committed bytes.
func TestExistingFileSwappedForFIFO(t *testing.T) {
	st := store.NewMemStore()
	data := randBytes(64<<10, 5)
	commit(t, st, 7, []tfile{{path: "model.pt", data: data}}, nil)
	dir := t.TempDir()
	final := filepath.Join(dir, "model.pt")
	writeFile(t, final, data)
	afterExistingLstat = func(string) {
		if err := os.Remove(final); err != nil {
			t.Error(err)
		}
		if err := syscall.Mkfifo(final, 0o644); err != nil {
			t.Error(err)
		}
	}
	t.Cleanup(func() { afterExistingLstat = nil })
	done := make(chan error, 1)
	go func() {
		res, err := Restore(context.Background(), Options{Store: st, Prefix: testPrefix, Dir: dir, Step: LatestStep, ChunkSize: mib})
		if err == nil && (res.Kept != 0 || res.Downloaded != 1) {
			t.Errorf("result %+v: want the file downloaded, nothing kept", res)
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		// Unblock the open so the goroutine can end.
		if f, err := os.OpenFile(final, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
		t.Fatal("the restore hung opening a FIFO swapped in at a final path")
	}
	assertFile(t, final, data)
}
