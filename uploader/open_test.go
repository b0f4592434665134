//go:build unix

package uploader

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/ferrylabs/ferry/agent/detect"
	"github.com/ferrylabs/ferry/internal/confine"
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

// TestPushConfinedToDir: `ferry push DIR` reads beneath DIR only: a folder
// of DIR swapped, after the gather, for a link to a folder holding a file
// of the same name (mode 0600) fails the push naming the link, and none of
// that file's bytes reach the store.
func TestPushConfinedToDir(t *testing.T) {
	dir, outside := t.TempDir(), t.TempDir()
	secret := []byte("not for upload")
	if err := os.Mkdir(filepath.Join(dir, "shards"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(dir, "shards", "rank0.pt"), filepath.Join(outside, "rank0.pt")} {
		if err := os.WriteFile(p, secret, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s, _, err := detect.Gather([]string{dir}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.Number = 1
	if err := os.Rename(filepath.Join(dir, "shards"), filepath.Join(dir, "aside")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "shards")); err != nil {
		t.Fatal(err)
	}
	st := store.NewMemStore()
	_, err = Destination{Store: st, Location: "s3://b/p", Prefix: "p"}.Push(context.Background(), s, PushOptions{})
	if !errors.Is(err, confine.ErrLink) || !strings.Contains(err.Error(), filepath.Join(dir, "shards", "rank0.pt")) {
		t.Errorf("push through a swapped folder: %v, want an error naming the link", err)
	}
	st.List(context.Background(), "", "", 0, func(o store.ObjectInfo) error {
		r, _ := st.Get(context.Background(), o.Key, 0, -1)
		b, _ := io.ReadAll(r)
		r.Close()
		if bytes.Contains(b, secret) {
			t.Errorf("object %s holds the outside file", o.Key)
		}
		return nil
	})
}
