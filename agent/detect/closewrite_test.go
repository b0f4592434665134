package detect

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

// TestRunCloseWrite: with close-write detection and a settle window of an
// hour, a DCP step (whose marker proves its file set) is reported once its
// writers closed its files, never while one is open, reopened for writing,
// or closed by a second descriptor while its writer still holds it; and a
// close survives a rename.
func TestRunCloseWrite(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("close-write detection uses Linux inotify")
	}
	dir := t.TempDir()
	opts := runOpts(dir, "dcp")
	opts.Settle = time.Hour
	opts.CloseWrite = true
	w := newWatcher(t, opts)
	r := start(t, w)
	// Files are created after Run's start-up scan has watched the folder.
	waitEvals(t, w, 1)
	mkdirs(t, w, dir, "step_100", "step_200", "step_300", "step_500", "step_600")

	// Markers are written after the bytes they vouch for (a marker older
	// than a file proves nothing: proof.go); a file written in full but
	// still held open by its writer is not closed yet.
	open100 := create(t, dir, "step_100/__0_0.distcp", "first half;second half")
	closeFile(t, create(t, dir, "step_100/.metadata", "md"))
	closeFile(t, create(t, dir, "step_200/__0_0.distcp", "whole file"))
	closeFile(t, create(t, dir, "step_200/.metadata", "md"))
	r.expect(Complete, 200) // 100 is still open
	closeFile(t, open100)
	if ev := r.expect(Complete, 100); shardSize(ev) != int64(len("first half;second half")) {
		t.Fatalf("step 100 reported with %d bytes", shardSize(ev))
	}

	// Closed, then opened again and written: open again, not closed.
	closeFile(t, create(t, dir, "step_300/__0_0.distcp", "v1"))
	f, err := os.OpenFile(filepath.Join(dir, "step_300/__0_0.distcp"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(" and more"); err != nil {
		t.Fatal(err)
	}
	closeFile(t, create(t, dir, "step_300/.metadata", "md"))
	// Still open for writing, but another descriptor (a plain touch)
	// opens it for writing and closes it.
	held := create(t, dir, "step_500/__0_0.distcp", "held open, then closed")
	closeFile(t, create(t, dir, "step_500/.metadata", "md"))
	touch, err := os.OpenFile(filepath.Join(dir, "step_500/__0_0.distcp"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	closeFile(t, touch)
	// Written in a folder under a temporary name and renamed into place.
	closeFile(t, create(t, dir, "step_600/.__0_0.distcp.tmp", "renamed"))
	if err := os.Rename(filepath.Join(dir, "step_600/.__0_0.distcp.tmp"), filepath.Join(dir, "step_600/__0_0.distcp")); err != nil {
		t.Fatal(err)
	}
	closeFile(t, create(t, dir, "step_600/.metadata", "md"))
	r.expect(Complete, 600)
	closeFile(t, f)
	if ev := r.expect(Complete, 300); shardSize(ev) != int64(len("v1 and more")) {
		t.Fatalf("step 300 reported with %d bytes", shardSize(ev))
	}
	closeFile(t, held)
	if ev := r.expect(Complete, 500); shardSize(ev) != int64(len("held open, then closed")) {
		t.Fatalf("step 500 reported with %d bytes", shardSize(ev))
	}
}

// TestRunCloseWriteNeedsProof: in a layout whose marker does not prove the
// file set (flat, no marker), every file being closed does not complete a
// step: the next file may come later. The settle window decides.
func TestRunCloseWriteNeedsProof(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("close-write detection uses Linux inotify")
	}
	dir := t.TempDir()
	opts := runOpts(dir, "flat")
	opts.StepPattern = `^(?:model|optim)-(\d+)\.pt$`
	opts.Settle = 2 * time.Second
	opts.CloseWrite = true
	w := newWatcher(t, opts)
	r := start(t, w)
	waitEvals(t, w, 1)
	begin := time.Now()
	closeFile(t, create(t, dir, "model-100.pt", "model"))
	time.Sleep(700 * time.Millisecond) // far past closeGrace, within Settle
	closeFile(t, create(t, dir, "optim-100.pt", "optim"))
	ev := r.expect(Complete, 100)
	if len(ev.Step.Files) != 2 {
		t.Fatalf("step 100 reported with %d files, want 2", len(ev.Step.Files))
	}
	if waited := time.Since(begin); waited < opts.Settle {
		t.Fatalf("reported after %v, before the settle window %v", waited, opts.Settle)
	}
}

// mkdirs creates step folders and waits for the evaluation that watched
// them, so that the files written next are seen by the close watcher.
func mkdirs(t *testing.T, w *Watcher, dir string, names ...string) {
	t.Helper()
	before := w.evals.Load()
	for _, n := range names {
		if err := os.Mkdir(filepath.Join(dir, n), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	waitEvals(t, w, before+1)
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

// shardSize is the size of a reported DCP step's shard __0_0.distcp.
func shardSize(ev Event) int64 {
	for _, f := range ev.Step.Files {
		if filepath.Base(f.RelPath) == "__0_0.distcp" {
			return f.Size
		}
	}
	return -1
}

// A step whose files were all closed before its folder's watch existed (a
// small save inside the debounce window) or before the watcher started (a
// restart) is judged from what the kernel says now: its marker is fresh,
// no process holds a file open for writing, so it completes at once, not
// after the settle window.
func TestRunClosedBeforeWatched(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("close-write detection uses Linux inotify")
	}
	dir := t.TempDir()
	write(t, dir, "step_100/__0_0.distcp", "written before the agent started")
	write(t, dir, "step_100/.metadata", "md")
	opts := runOpts(dir, "dcp")
	opts.Settle = time.Hour
	opts.Debounce = 500 * time.Millisecond
	opts.CloseWrite = true
	w := newWatcher(t, opts)
	r := start(t, w)
	r.expect(Complete, 100)
	// Written and closed at once after the start: the folder's watches
	// come after the files' closes.
	write(t, dir, "step_200/__0_0.distcp", "r0")
	write(t, dir, "step_200/__1_0.distcp", "r1")
	write(t, dir, "step_200/.metadata", "md")
	start := time.Now()
	r.expect(Complete, 200)
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("step 200 took %v: it waited for the settle window", d)
	}
	// Held open for writing: not complete while open, whatever its marker.
	if err := os.MkdirAll(filepath.Join(dir, "step_300"), 0o755); err != nil {
		t.Fatal(err)
	}
	f := create(t, dir, "step_300/__0_0.distcp", "still open")
	write(t, dir, "step_300/.metadata", "md")
	select {
	case ev := <-r.events:
		t.Fatalf("event %v %d while a shard is open for writing", ev.Kind, ev.Step.Number)
	case <-time.After(2 * time.Second):
	}
	closeFile(t, f)
	r.expect(Complete, 300)
}

// TestResaveInPlaceNotWholeByCloses: HF Trainer <= 4.35 writes each rank's
// rng_state_R.pth after trainer_state.json with no barrier
// (testdata/saveorders/hf-trainer-le435.trace). A save of a committed step
// again, in place, leaves every file closed between two ranks' writes,
// and the ranks' old RNG files still count toward --expected-ranks: the
// close-write fast path committed such mixes of two saves as revisions
// (the trace replay, kill 14 of 14, gap 2 s, the job restarted to save
// step 200 again). A re-saved step now waits the settle window.
func TestResaveInPlaceNotWholeByCloses(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("close-write detection uses Linux inotify")
	}
	dir := t.TempDir()
	opts := runOpts(dir, "hf")
	opts.Settle, opts.CloseWrite, opts.ExpectedRanks = time.Hour, true, 2
	w := newWatcher(t, opts)
	r := start(t, w)
	waitEvals(t, w, 1)
	mkdirs(t, w, dir, "checkpoint-200")
	save := func(v string, files ...string) {
		for _, f := range files {
			closeFile(t, create(t, dir, "checkpoint-200/"+f, v+" "+f))
		}
	}
	save("v1", "model.safetensors", "trainer_state.json", "rng_state_0.pth", "rng_state_1.pth")
	r.expect(Complete, 200)
	// The re-save: rank 0's files and its RNG state; rank 1 has not
	// written its RNG state yet.
	save("v2", "model.safetensors", "trainer_state.json", "rng_state_0.pth")
	deadline := time.After(2 * time.Second)
	for {
		select {
		case ev := <-r.events:
			if ev.Kind == Complete {
				t.Fatalf("a mix of two saves reported complete: %v", ev.Step.Files)
			}
			continue
		case <-deadline:
		}
		break
	}
}
