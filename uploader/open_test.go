//go:build unix

package uploader

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/ferrylabs/ferry/internal/store"
)

// TestUploadRefusesSwappedFile: files scanned as regular and then replaced
// by a symlink to a secret outside the checkpoint directory, or by a FIFO,
// are refused with an error naming them, not followed (nor blocked on), and
// nothing of the secret reaches the store.
func TestUploadRefusesSwappedFile(t *testing.T) {
	dir, outside := t.TempDir(), t.TempDir()
	secret := filepath.Join(outside, "secret")
	if err := os.WriteFile(secret, []byte("not for upload"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "rank0.pt")
	if err := os.Symlink(secret, link); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "rank1.pt")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ path, want string }{
		{link, "a symbolic link on the way (not followed)"},
		{fifo, "not a regular file (a FIFO)"},
	} {
		st := store.NewMemStore()
		u := New(Options{Store: st})
		_, err := u.Upload(context.Background(), []File{{LocalPath: c.path, RelPath: filepath.Base(c.path), Key: "P/data/" + filepath.Base(c.path)}})
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), c.path) {
			t.Errorf("upload of %s: %v, want an error saying %q", c.path, err, c.want)
		}
		n := 0
		st.List(context.Background(), "", "", 0, func(store.ObjectInfo) error { n++; return nil })
		if n != 0 {
			t.Errorf("upload of %s left %d objects", c.path, n)
		}
	}
}
