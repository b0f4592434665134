//go:build unix

package detect

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/ferrylabs/ferry/internal/confine"
)

// TestReadsFollowNoSwap: the pointer file a layout reads (ReadSmall) and
// the readability check of a step's files (openForRead), scanned as
// regular files, are refused, and return at once, when a FIFO was swapped
// in since the scan or the folder holding them became a link to another
// folder; nothing of that folder is read.
func TestReadsFollowNoSwap(t *testing.T) {
	root, outside := t.TempDir(), t.TempDir()
	for _, d := range []string{"ckpt", "fifo"} {
		if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{filepath.Join(root, "ckpt", "latest"), filepath.Join(root, "fifo", "latest"), filepath.Join(outside, "latest")} {
		if err := os.WriteFile(p, []byte("global_step7"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tr := newTree(root)
	if err := tr.scanAll(nil); err != nil {
		t.Fatal(err)
	}
	if b, err := tr.ReadSmall("ckpt/latest"); err != nil || string(b) != "global_step7" {
		t.Fatalf("ReadSmall before any swap: %q, %v", b, err)
	}
	if err := os.Rename(filepath.Join(root, "ckpt"), filepath.Join(root, "aside")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(root, "ckpt")); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(root, "fifo", "latest")
	if err := os.Remove(fifo); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	dir, err := confine.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	for p, want := range map[string]error{"ckpt/latest": confine.ErrLink, "fifo/latest": confine.ErrNotRegular} {
		done := make(chan struct{})
		go func() {
			defer close(done)
			if b, err := tr.ReadSmall(p); !errors.Is(err, want) {
				t.Errorf("ReadSmall(%s) = %q, %v; want %v", p, b, err, want)
			}
			if err := openForRead(dir, File{RelPath: p}); !errors.Is(err, want) {
				t.Errorf("openForRead(%s) = %v; want %v", p, err, want)
			}
		}()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("reading %s blocked", p)
		}
	}
}

// TestSpecialFileInStepWarned: a FIFO in a complete step's folder is left
// out of the step with a warning naming it.
func TestSpecialFileInStepWarned(t *testing.T) {
	dir := t.TempDir()
	step := filepath.Join(dir, "step_5")
	if err := os.Mkdir(step, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"__0_0.distcp", ".metadata"} {
		if err := os.WriteFile(filepath.Join(step, n), []byte(n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mkfifo(filepath.Join(step, "__1_0.distcp"), 0o644); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	for _, n := range []string{"__0_0.distcp", ".metadata"} {
		os.Chtimes(filepath.Join(step, n), old, old)
	}
	core, logs := observer.New(zap.WarnLevel)
	w := newWatcher(t, Options{Dir: dir, Layout: "dcp", Settle: time.Second, Logger: zap.New(core)})
	steps, err := w.Scan()
	if err != nil || len(steps) != 1 || len(steps[0].Files) != 2 {
		t.Fatalf("scan: %v, %v; want step 5 with its two regular files", describeAll(steps), err)
	}
	warns := logs.FilterMessageSnippet("special file").All()
	if len(warns) != 1 || warns[0].ContextMap()["path"] != "step_5/__1_0.distcp" {
		t.Errorf("warnings %v, want one naming step_5/__1_0.distcp", logs.All())
	}
}
