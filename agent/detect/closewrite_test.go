package detect

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

// TestRunCloseWrite: with close-write detection and a settle window of an
// hour, a file is reported once its writer closed it, never while it is
// open (or reopened for writing), and a close survives a rename.
func TestRunCloseWrite(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("close-write detection uses Linux inotify")
	}
	dir := t.TempDir()
	opts := runOpts(dir, "flat")
	opts.StepPattern = `^model-(\d+)\.pt$`
	opts.Settle = time.Hour
	opts.CloseWrite = true
	w := newWatcher(t, opts)
	r := start(t, w)
	// Files are created after Run's start-up scan has watched the folder.
	waitEvals(t, w, 1)

	open100 := create(t, dir, "model-100.pt", "first half;")
	closeFile(t, create(t, dir, "model-200.pt", "whole file"))
	r.expect(Complete, 200) // 100 is still open

	if _, err := open100.WriteString("second half"); err != nil {
		t.Fatal(err)
	}
	closeFile(t, open100)
	if ev := r.expect(Complete, 100); ev.Step.Files[0].Size != int64(len("first half;second half")) {
		t.Fatalf("step 100 reported with %d bytes", ev.Step.Files[0].Size)
	}

	// Closed, then opened again and written: open again, not closed.
	closeFile(t, create(t, dir, "model-300.pt", "v1"))
	f, err := os.OpenFile(filepath.Join(dir, "model-300.pt"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(" and more"); err != nil {
		t.Fatal(err)
	}
	// Written under a temporary name and renamed into place.
	closeFile(t, create(t, dir, ".model-400.pt.tmp", "renamed"))
	if err := os.Rename(filepath.Join(dir, ".model-400.pt.tmp"), filepath.Join(dir, "model-400.pt")); err != nil {
		t.Fatal(err)
	}
	r.expect(Complete, 400)
	closeFile(t, f)
	if ev := r.expect(Complete, 300); ev.Step.Files[0].Size != int64(len("v1 and more")) {
		t.Fatalf("step 300 reported with %d bytes", ev.Step.Files[0].Size)
	}
}

func create(t *testing.T, dir, name, content string) *os.File {
	t.Helper()
	f, err := os.Create(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(content); err != nil {
		t.Fatal(err)
	}
	return f
}

func closeFile(t *testing.T, f *os.File) {
	t.Helper()
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestRunCloseWriteFolderRenamed: a DCP step written in a folder that is
// then renamed into place (as Orbax and some savers do) is known closed
// under its final names.
func TestRunCloseWriteFolderRenamed(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("close-write detection uses Linux inotify")
	}
	dir := t.TempDir()
	opts := runOpts(dir, "dcp")
	opts.Settle = time.Hour
	opts.CloseWrite = true
	w := newWatcher(t, opts)
	r := start(t, w)
	waitEvals(t, w, 1)
	before := w.evals.Load()
	if err := os.Mkdir(filepath.Join(dir, "incoming"), 0o755); err != nil {
		t.Fatal(err)
	}
	// The evaluation after the folder's event is the one that watched it.
	waitEvals(t, w, before+1)
	for _, name := range []string{"__0_0.distcp", "__1_0.distcp", ".metadata"} {
		closeFile(t, create(t, dir, "incoming/"+name, "bytes of "+name))
	}
	if err := os.Rename(filepath.Join(dir, "incoming"), filepath.Join(dir, "step_100")); err != nil {
		t.Fatal(err)
	}
	if ev := r.expect(Complete, 100); len(ev.Step.Files) != 3 {
		t.Fatalf("step 100 reported with %d files", len(ev.Step.Files))
	}
}

// waitEvals waits until the watcher has evaluated at least n times: an
// evaluation follows the scan that adds watches.
func waitEvals(t *testing.T, w *Watcher, n int64) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for w.evals.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("watcher made %d evaluations in %v, want %d", w.evals.Load(), waitTimeout, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
