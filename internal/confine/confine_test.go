//go:build linux

package confine

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// tree builds the watch dir of these tests: root/step-1/model.pt, a
// folder outside with secret files, and root/step-2, a link to it.
func tree(t *testing.T) (root, outside string) {
	t.Helper()
	root, outside = t.TempDir(), t.TempDir()
	must(t, os.Mkdir(filepath.Join(root, "step-1"), 0o755))
	must(t, os.WriteFile(filepath.Join(root, "step-1", "model.pt"), []byte("weights"), 0o644))
	must(t, os.WriteFile(filepath.Join(outside, "model.pt"), []byte("secret"), 0o600))
	must(t, os.Symlink(outside, filepath.Join(root, "step-2")))
	must(t, os.Symlink(filepath.Join(outside, "model.pt"), filepath.Join(root, "step-1", "best.pt")))
	must(t, os.Symlink("model.pt", filepath.Join(root, "step-1", "inside.pt")))
	must(t, syscall.Mkfifo(filepath.Join(root, "step-1", "fifo.pt"), 0o644))
	must(t, os.Link(filepath.Join(outside, "model.pt"), filepath.Join(root, "step-1", "linked.pt")))
	return root, outside
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// both runs a test with openat2 and with the walk of components.
func both(t *testing.T, fn func(t *testing.T)) {
	t.Run("openat2", fn)
	t.Run("walk", func(t *testing.T) {
		was := noOpenat2.Load()
		noOpenat2.Store(true)
		defer noOpenat2.Store(was)
		fn(t)
	})
}

// TestOpenRegularFollowsNoLink: a regular file beneath the directory
// opens; a link anywhere on the way (a folder swapped for a link to
// another folder, a file that is a link, even to a file inside), a FIFO
// (without blocking), a hard-linked file and an escaping path are refused,
// and nothing of the outside file is read.
func TestOpenRegularFollowsNoLink(t *testing.T) {
	both(t, func(t *testing.T) {
		root, _ := tree(t)
		d, err := Open(root)
		must(t, err)
		defer d.Close()
		f, st, err := d.OpenRegular("step-1/model.pt")
		must(t, err)
		b, _ := io.ReadAll(f)
		f.Close()
		if string(b) != "weights" || st.Size != 7 || st.Ino == 0 || st.Nlink != 1 {
			t.Fatalf("read %q, stat %+v", b, st)
		}
		for rel, want := range map[string]error{
			"step-2/model.pt":     ErrLink,
			"step-1/best.pt":      ErrLink,
			"step-1/inside.pt":    ErrLink,
			"step-1/fifo.pt":      ErrNotRegular,
			"step-1/linked.pt":    ErrHardLinks,
			"step-1":              ErrNotRegular,
			"../x":                nil,
			"step-1/../../x":      nil,
			"/etc/passwd":         nil,
			"step-1//model.pt":    nil,
			"step-1/./model.pt":   nil,
			"step-2/../step-1/nx": nil,
		} {
			f, _, err := d.OpenRegular(rel)
			if err == nil {
				f.Close()
				t.Errorf("%s: opened", rel)
				continue
			}
			if want != nil && !errors.Is(err, want) {
				t.Errorf("%s: %v, want %v", rel, err, want)
			}
		}
	})
}

// TestRemoveIfThroughSwappedFolder: a file is removed only through real
// folders; through a folder swapped for a link nothing outside is touched,
// even when the file there has the same name.
func TestRemoveIfThroughSwappedFolder(t *testing.T) {
	both(t, func(t *testing.T) {
		root, outside := tree(t)
		d, err := Open(root)
		must(t, err)
		defer d.Close()
		yes := func(Stat) bool { return true }
		if ok, err := d.RemoveIf("step-2/model.pt", yes); ok || !errors.Is(err, ErrLink) {
			t.Errorf("remove through a link: %v %v", ok, err)
		}
		if _, err := os.Stat(filepath.Join(outside, "model.pt")); err != nil {
			t.Errorf("outside file: %v", err)
		}
		if ok, err := d.RemoveIf("step-1/best.pt", yes); !ok || err != nil {
			t.Errorf("remove a link itself: %v %v", ok, err)
		}
		if _, err := os.Stat(filepath.Join(outside, "model.pt")); err != nil {
			t.Errorf("outside file after removing the link to it: %v", err)
		}
		if ok, err := d.RemoveIf("step-1/model.pt", func(s Stat) bool { return s.Size == 99 }); ok || err != nil {
			t.Errorf("kept by its stat: %v %v", ok, err)
		}
		if ok, err := d.RemoveIf("step-1/model.pt", yes); !ok || err != nil {
			t.Errorf("remove: %v %v", ok, err)
		}
		if err := d.RemoveEmptyDir("step-2"); err == nil {
			t.Errorf("removed a link as an empty dir")
		}
		if _, err := d.Lstat("step-2/model.pt"); !errors.Is(err, ErrLink) {
			t.Errorf("lstat through a link: %v", err)
		}
		st, err := d.Lstat("step-2")
		if err != nil || st.Mode&os.ModeSymlink == 0 {
			t.Errorf("lstat of the link: %+v %v", st, err)
		}
		if _, err := d.OpenDir("step-2"); !errors.Is(err, ErrLink) || !strings.Contains(err.Error(), "step-2") {
			t.Errorf("open dir through a link: %v", err)
		}
	})
}
