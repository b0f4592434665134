package detect

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// A single-file trainer rewrites its checkpoint in place, then copies it
// to model_best (the PyTorch ImageNet example): every version whose files
// are closed is reported, as a counted step, without waiting for a settle
// window that a file rewritten every few seconds would never reach.
func TestRunSingleFileTrainer(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("close-write detection uses Linux inotify")
	}
	dir := t.TempDir()
	write(t, dir, "train.log", "logs are not checkpoints")
	opts := runOpts(dir, "auto")
	opts.Settle = time.Hour
	opts.CloseWrite = true
	w := newWatcher(t, opts)
	r := start(t, w)
	waitEvals(t, w, 1)
	for epoch := 1; epoch <= 3; epoch++ {
		state := strings.Repeat("epoch ", epoch*100)
		write(t, dir, "checkpoint.pth.tar", state)
		ev := r.nextVersion()
		if got := describe(ev.Step); len(got) < 2 || got[1] != "checkpoint.pth.tar" || (epoch > 1) != (len(got) == 3) {
			t.Fatalf("epoch %d: version %v", epoch, got)
		}
		if ev.Step.Files[0].Size != int64(len(state)) {
			t.Fatalf("epoch %d: version with %d bytes, want %d", epoch, ev.Step.Files[0].Size, len(state))
		}
		if epoch%2 == 1 {
			write(t, dir, "model_best.pth.tar", state) // shutil.copyfile
			ev = r.nextVersion()
			if n := len(ev.Step.Files); n != 2 || ev.Step.Files[1].Size != int64(len(state)) {
				t.Fatalf("epoch %d: version with model_best: %v", epoch, describe(ev.Step))
			}
		}
	}
	if w.LayoutName() != "single" {
		t.Errorf("layout %q, want single", w.LayoutName())
	}
	// A version written through a temporary name and os.replace is
	// reported once replaced, not while the temporary file exists.
	write(t, dir, "checkpoint.pth.tar.tmp", "replaced atomically")
	if err := os.Rename(filepath.Join(dir, "checkpoint.pth.tar.tmp"), filepath.Join(dir, "checkpoint.pth.tar")); err != nil {
		t.Fatal(err)
	}
	ev := r.nextVersion()
	if ev.Step.Files[0].Size != int64(len("replaced atomically")) {
		t.Fatalf("replaced version %v", describe(ev.Step))
	}
	// Held open for writing: no version until it is closed.
	f := create(t, dir, "checkpoint.pth.tar", "half written")
	r.noVersion(time.Second, "while the checkpoint is open for writing")
	closeFile(t, f)
	ev = r.nextVersion()
	if ev.Step.Files[0].Size != int64(len("half written")) {
		t.Fatalf("version %v", describe(ev.Step))
	}
}

// Lightning: top-k files named by step, last.ckpt rewritten, older top-k
// files deleted; a torn torch.save file (its writer killed) is no version.
func TestRunSingleLayoutLightningAndTornFile(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("close-write detection uses Linux inotify")
	}
	dir := t.TempDir()
	opts := runOpts(dir, "single")
	opts.Settle = 3 * time.Second // when a torn file is looked at again
	opts.CloseWrite = true
	w := newWatcher(t, opts)
	r := start(t, w)
	waitEvals(t, w, 1)
	whole := writeTorchZip(t, filepath.Join(t.TempDir(), "whole.ckpt"))
	if err := os.WriteFile(filepath.Join(dir, "epoch=0-step=10.ckpt"), whole, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "last.ckpt"), whole, 0o644); err != nil {
		t.Fatal(err)
	}
	ev := r.nextVersion()
	for len(ev.Step.Files) < 2 { // the two files may close in two evaluations
		ev = r.nextVersion()
	}
	// Killed while rewriting last.ckpt: cut short, it is left out, and the
	// version is made of the whole files.
	if err := os.WriteFile(filepath.Join(dir, "last.ckpt"), whole[:len(whole)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	ev = r.nextVersion()
	if got := strings.Join(describe(ev.Step)[1:], " "); got != "epoch=0-step=10.ckpt" {
		t.Fatalf("version with a torn last.ckpt: %s", got)
	}
	if err := os.WriteFile(filepath.Join(dir, "last.ckpt"), whole, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "epoch=1-step=20.ckpt"), whole, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "epoch=0-step=10.ckpt")); err != nil {
		t.Fatal(err)
	}
	ev = r.nextVersion()
	for strings.Join(describe(ev.Step)[1:], " ") != "epoch=1-step=20.ckpt last.ckpt" {
		ev = r.nextVersion()
	}
}

// nextVersion returns the next Complete event of the single layout,
// skipping the Deleted events of the versions it supersedes.
func (r *running) nextVersion() Event {
	r.t.Helper()
	for {
		ev := r.next()
		switch {
		case ev.Kind == Deleted && superseded(ev.Step.ID):
		case ev.Kind == Complete && ev.Step.Counted && superseded(ev.Step.ID):
			return ev
		default:
			r.t.Fatalf("got %v %v, want a version of the single layout", ev.Kind, describe(ev.Step))
		}
	}
}

// noVersion fails if a Complete event comes within d.
func (r *running) noVersion(d time.Duration, why string) {
	r.t.Helper()
	deadline := time.After(d)
	for {
		select {
		case ev := <-r.events:
			if ev.Kind == Complete {
				r.t.Fatalf("version %v reported %s", describe(ev.Step), why)
			}
		case <-deadline:
			return
		}
	}
}
