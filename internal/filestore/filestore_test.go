package filestore_test

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ferrylabs/ferry/internal/filestore"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/internal/store/storetest"
)

// newStore opens a store on a fresh folder under dir (t.TempDir() when
// empty) and checks, when the subtest ends, that it left no temporary
// file behind.
func newStore(t *testing.T, dir string) *filestore.Store {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	} else {
		var err error
		if dir, err = os.MkdirTemp(dir, "store-"); err != nil {
			t.Fatal(err)
		}
	}
	st, err := filestore.Open(dir, filestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		st.Close()
		if left := tempFiles(t, dir); len(left) > 0 {
			t.Errorf("temporary files left behind: %q", left)
		}
	})
	return st
}

// tempFiles returns what lies in the store's temporary folder.
func tempFiles(t *testing.T, dir string) []string {
	t.Helper()
	des, err := os.ReadDir(filepath.Join(dir, ".ferry", "tmp"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	var names []string
	for _, de := range des {
		names = append(names, de.Name())
	}
	return names
}

func TestStore(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return newStore(t, "") })
}

func TestOpenMissingFolder(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "not-mounted")
	_, err := filestore.Open(dir, filestore.Options{})
	if !errors.Is(err, store.ErrNoBucket) || !errors.Is(err, store.ErrNotExist) {
		t.Fatalf("Open of a missing folder: %v, want ErrNoBucket and ErrNotExist", err)
	}
	var ur interface{ UserReason() string }
	if !errors.As(err, &ur) || !strings.Contains(ur.UserReason(), "mkdir -p "+dir) {
		t.Errorf("Open of a missing folder: %v, want a reason that says to create %s", err, dir)
	}
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Open created the missing folder: %v", err)
	}
}

// TestKeysStayBelowRoot: keys that would leave the root, or reach the
// store's own files, are refused by every call, and nothing is written
// outside the root.
func TestKeysStayBelowRoot(t *testing.T) {
	outer := t.TempDir()
	root := filepath.Join(outer, "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outer, filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outer, "secret"), []byte("outside"), 0o644); err != nil {
		t.Fatal(err)
	}
	st, err := filestore.Open(root, filestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	data := []byte("x")
	for _, key := range []string{"../escape", "a/../../escape", "/etc/escape", "a\x00b", "", "a//b", "./a", "a/", ".ferry/tmp/x", ".ferry"} {
		_, err := st.Put(t.Context(), key, bytes.NewReader(data), 1, store.PutOptions{})
		if !errors.Is(err, filestore.ErrInvalidKey) {
			t.Errorf("Put %q: %v, want ErrInvalidKey", key, err)
		}
		if _, err := st.Head(t.Context(), key); !errors.Is(err, filestore.ErrInvalidKey) {
			t.Errorf("Head %q: %v, want ErrInvalidKey", key, err)
		}
		if _, err := st.Get(t.Context(), key, 0, -1); !errors.Is(err, filestore.ErrInvalidKey) {
			t.Errorf("Get %q: %v, want ErrInvalidKey", key, err)
		}
		if err := st.Delete(t.Context(), key); !errors.Is(err, filestore.ErrInvalidKey) {
			t.Errorf("Delete %q: %v, want ErrInvalidKey", key, err)
		}
		if _, err := st.CreateMultipart(t.Context(), key); !errors.Is(err, filestore.ErrInvalidKey) {
			t.Errorf("CreateMultipart %q: %v, want ErrInvalidKey", key, err)
		}
	}
	// A symbolic link inside the root that leads out of it is not followed.
	if _, err := st.Put(t.Context(), "link/escape", bytes.NewReader(data), 1, store.PutOptions{}); err == nil {
		t.Error("Put through a link out of the root succeeded")
	}
	if _, err := st.Get(t.Context(), "link/secret", 0, -1); err == nil {
		t.Error("Get through a link out of the root succeeded")
	}
	if _, err := st.Head(t.Context(), "link/secret"); err == nil {
		t.Error("Head through a link out of the root succeeded")
	}
	des, err := os.ReadDir(outer)
	if err != nil {
		t.Fatal(err)
	}
	if len(des) != 2 || des[0].Name() != "root" || des[1].Name() != "secret" {
		t.Errorf("the root's parent holds %v, want only root and secret", des)
	}
	var listed []string
	if err := st.List(t.Context(), "", "", 0, func(o store.ObjectInfo) error { listed = append(listed, o.Key); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(listed) != 0 {
		t.Errorf("List shows %q, want nothing (a link is not an object)", listed)
	}
}

// TestNothingButObjectsListed: a multipart upload in progress, a refused
// Put and a lost create leave nothing that List shows, and a delete
// removes the folders it emptied, so the name can be an object again.
func TestNothingButObjectsListed(t *testing.T) {
	dir := t.TempDir()
	st, err := filestore.Open(dir, filestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := t.Context()
	storetest.MustPut(t, st, "a/b/c", []byte("abc"))
	id, err := st.CreateMultipart(ctx, "a/b/d")
	if err != nil {
		t.Fatal(err)
	}
	part := storetest.RandomBytes(1, 1000)
	if _, err := st.UploadPart(ctx, "a/b/d", id, 1, bytes.NewReader(part), 1000, store.CRC32C(part)); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Put(ctx, "a/e", bytes.NewReader(part), 1000, store.PutOptions{CRC32C: store.CRC32C(part[1:])}); err == nil {
		t.Fatal("Put with a wrong CRC32C succeeded")
	}
	if _, err := st.Put(ctx, "a/b/c", bytes.NewReader(part), 1000, store.PutOptions{IfNoneMatch: true}); !errors.Is(err, store.ErrPreconditionFailed) {
		t.Fatalf("create of an existing key: %v", err)
	}
	var listed []string
	if err := st.List(ctx, "", "", 0, func(o store.ObjectInfo) error { listed = append(listed, o.Key); return nil }); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(listed, []string{"a/b/c"}) {
		t.Errorf("List = %q, want only a/b/c", listed)
	}
	if left := tempFiles(t, dir); len(left) != 0 {
		t.Errorf("temporary files left behind: %q", left)
	}
	if err := st.AbortMultipart(ctx, "a/b/d", id); err != nil {
		t.Fatal(err)
	}
	if err := st.Delete(ctx, "a/b/c"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "a")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the folders of a deleted key stay: %v", err)
	}
	storetest.MustPut(t, st, "a", []byte("a is an object now"))
}
