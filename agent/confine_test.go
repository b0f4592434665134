package agent

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/agent/control"
	"github.com/ferrylabs/ferry/internal/store"
)

// secret marks the bytes of the folder outside the watch dir: none of
// them may reach the bucket.
var secret = []byte("SECRET-outside-the-watch-dir;")

// TestSwappedStepFolderNotFollowed: a DCP step folder found complete is
// swapped, after detection and before its files are opened, for a
// symbolic link to another folder holding files of the same names (one of
// them mode 0600, as /etc/shadow would be), with inotify and with --poll.
// Nothing of the other folder is read into the bucket and the step is not
// committed with it (the reproduction committed step 2 holding
// the other folder's file).
func TestSwappedStepFolderNotFollowed(t *testing.T) {
	for _, poll := range []bool{false, true} {
		t.Run(map[bool]string{false: "inotify", true: "poll"}[poll], func(t *testing.T) {
			checkSwapNotFollowed(t, poll)
		})
	}
}

func checkSwapNotFollowed(t *testing.T, poll bool) {
	outside := t.TempDir()
	big := bytes.Repeat(secret, (6<<20)/len(secret)) // sent whole, not packed
	writeFile(t, filepath.Join(outside, "__0_0.distcp"), big, 0o600)
	writeFile(t, filepath.Join(outside, ".metadata"), secret, 0o600)

	var h *harness
	var once sync.Once
	swapped := make(chan struct{})
	h = startAgent(t, func(o *Options) {
		o.Detect.Layout = "dcp"
		o.Detect.Poll, o.Detect.PollInterval = poll, 100*time.Millisecond
		o.Store = &store.Faulty{Inner: o.Store, Before: func(op, key string) error {
			// The push of step 2 has begun (its state is uploading,
			// set before Push): swap the folder before any file of it
			// is opened.
			if uploadingStep(h, 2) {
				once.Do(func() { swapFolder(t, h.watch, "step_2", outside); close(swapped) })
			}
			return nil
		}}
	})
	dir := filepath.Join(h.watch, "step_2")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// The same sizes and mtimes as the files outside (the trainer can
	// stat /etc/shadow and touch its own files): only the folder swap,
	// not a changed stamp, tells them apart.
	writeFile(t, filepath.Join(dir, "__0_0.distcp"), bytes.Repeat([]byte("w"), len(big)), 0o644)
	writeFile(t, filepath.Join(dir, ".metadata"), bytes.Repeat([]byte("m"), len(secret)), 0o644)
	for _, name := range []string{"__0_0.distcp", ".metadata"} {
		fi, err := os.Stat(filepath.Join(outside, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(filepath.Join(dir, name), fi.ModTime(), fi.ModTime()); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-swapped:
	case <-time.After(30 * time.Second):
		t.Fatal("step 2 was never uploaded")
	}
	// Let the agent finish what it does with the step (fail, abandon).
	deadline := time.Now().Add(10 * time.Second)
	for uploadingStep(h, 2) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond)
	h.stop()
	if steps := h.committedSteps(); len(steps) != 0 {
		t.Errorf("committed steps %v after the step folder became a link to another folder", steps)
	}
	assertNoSecret(t, h.st)
}

// uploadingStep reports whether the agent is uploading step n.
func uploadingStep(h *harness, n int64) bool {
	if h == nil || h.agent == nil {
		return false
	}
	h.agent.mu.Lock()
	defer h.agent.mu.Unlock()
	e := h.agent.steps[n]
	return e != nil && e.status.State == control.StateUploading
}

// swapFolder moves root/name aside and puts a link to target in its place.
func swapFolder(t *testing.T, root, name, target string) {
	if err := os.Rename(filepath.Join(root, name), filepath.Join(root, "aside")); err != nil {
		t.Error(err)
	}
	if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
		t.Error(err)
	}
}

func writeFile(t *testing.T, p string, b []byte, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(p, b, mode); err != nil {
		t.Fatal(err)
	}
}

// assertNoSecret reads every object of the bucket, and every part of an
// unfinished multipart upload it can list, and fails if one holds the
// secret bytes.
func assertNoSecret(t *testing.T, st store.Store) {
	t.Helper()
	ctx := context.Background()
	var keys []string
	if err := st.List(ctx, "", "", 0, func(o store.ObjectInfo) error { keys = append(keys, o.Key); return nil }); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		r, err := st.Get(ctx, k, 0, -1)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(r)
		r.Close()
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, secret) {
			t.Errorf("object %s holds bytes of the folder outside the watch dir", k)
		}
	}
	ups, err := st.ListUploads(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range ups {
		parts, _ := st.ListParts(ctx, u.Key, u.UploadID)
		if len(parts) > 0 {
			t.Errorf("upload of %s holds %d parts sent after the swap", u.Key, len(parts))
		}
	}
}

// TestKeepLocalThroughSwappedFolder: with --keep-local 1, a committed
// step folder swapped for a link to another folder whose files have the
// same names, sizes and mtimes is not followed when the next commit
// cleans it up: nothing outside the watch dir is deleted.
func TestKeepLocalThroughSwappedFolder(t *testing.T) {
	h := startAgent(t, func(o *Options) { o.Detect.Layout = "dcp"; o.KeepLocal = 1 })
	outside := t.TempDir()
	writeStep := func(name string) {
		dir := filepath.Join(h.watch, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(dir, "__0_0.distcp"), []byte("weights of "+name), 0o644)
		writeFile(t, filepath.Join(dir, ".metadata"), []byte("metadata"), 0o644)
		if left := h.flush(60 * time.Second); len(left) != 0 {
			t.Fatalf("not committed: %v", left)
		}
	}
	writeStep("step_1")
	for _, name := range []string{"__0_0.distcp", ".metadata"} {
		in := filepath.Join(h.watch, "step_1", name)
		fi, err := os.Stat(in)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(in)
		out := filepath.Join(outside, name)
		writeFile(t, out, b, 0o600)
		if err := os.Chtimes(out, fi.ModTime(), fi.ModTime()); err != nil {
			t.Fatal(err)
		}
	}
	swapFolder(t, h.watch, "step_1", outside)
	writeStep("step_2")
	writeStep("step_3") // step_2, a real folder, is deleted whole
	h.stop()
	if _, err := os.Lstat(filepath.Join(h.watch, "step_2")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("step_2 still on disk with --keep-local 1 (lstat: %v)", err)
	}
	for _, name := range []string{"__0_0.distcp", ".metadata"} {
		if _, err := os.Stat(filepath.Join(outside, name)); err != nil {
			t.Errorf("keep-local deleted %s outside the watch dir: %v", name, err)
		}
	}
	if _, err := os.Stat(filepath.Join(h.watch, "step_3", "__0_0.distcp")); err != nil {
		t.Errorf("newest committed step deleted: %v", err)
	}
}

// TestHoldingsThroughSwappedFolder: a committed step folder swapped for a
// link to a folder whose files have the same names, sizes and mtimes is
// not offered to restoring peers (--serve-peers), nor is a committed file
// that gained a second hard link.
func TestHoldingsThroughSwappedFolder(t *testing.T) {
	h := startAgent(t, func(o *Options) { o.Detect.Layout = "dcp"; o.Upload.NoPack = true })
	for _, n := range []string{"step_1", "step_2"} {
		dir := filepath.Join(h.watch, n)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(dir, "__0_0.distcp"), bytes.Repeat([]byte(n), 1<<20), 0o644)
		writeFile(t, filepath.Join(dir, ".metadata"), []byte("metadata"), 0o644)
		if left := h.flush(60 * time.Second); len(left) != 0 {
			t.Fatalf("not committed: %v", left)
		}
	}
	for _, n := range []int64{1, 2} {
		if _, held, err := h.agent.Holdings(t.Context(), n); err != nil || len(held) != 2 {
			t.Fatalf("step %d before any change: %d files held, %v", n, len(held), err)
		}
	}
	outside := t.TempDir()
	for _, name := range []string{"__0_0.distcp", ".metadata"} {
		in := filepath.Join(h.watch, "step_1", name)
		fi, err := os.Stat(in)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(in)
		writeFile(t, filepath.Join(outside, name), b, 0o600)
		if err := os.Chtimes(filepath.Join(outside, name), fi.ModTime(), fi.ModTime()); err != nil {
			t.Fatal(err)
		}
	}
	swapFolder(t, h.watch, "step_1", outside)
	if err := os.Link(filepath.Join(h.watch, "step_2", "__0_0.distcp"), filepath.Join(outside, "linked")); err != nil {
		t.Fatal(err)
	}
	if _, held, err := h.agent.Holdings(t.Context(), 1); err != nil || len(held) != 0 {
		t.Errorf("step 1 through a link to another folder: %d files offered (%v), want none", len(held), err)
	}
	if _, held, err := h.agent.Holdings(t.Context(), 2); err != nil || len(held) != 1 || held[0].File.Path != "step_2/.metadata" {
		t.Errorf("step 2 with a hard-linked file: offered %v (%v), want only step_2/.metadata", held, err)
	}
}
