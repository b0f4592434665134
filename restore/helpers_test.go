package restore

import (
	"bytes"
	"context"
	"encoding/hex"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zeebo/blake3"

	"github.com/ferrylabs/ferry/internal/remote"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/manifest"
)

const testPrefix = "team/run1"

// tfile is a file of a test checkpoint.
type tfile struct {
	path  string
	data  []byte
	rank  *int
	mtime time.Time // recorded in the manifest when set
}

func rank(n int) *int { return &n }

func b3(data []byte) string {
	s := blake3.Sum256(data)
	return hex.EncodeToString(s[:])
}

// randBytes returns n pseudo-random bytes, different for each seed.
func randBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 42))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// commit puts the files' objects and commits a manifest for them.
func commit(t testing.TB, st store.Store, step int64, files []tfile, links []manifest.Symlink) *manifest.Manifest {
	t.Helper()
	ctx := context.Background()
	m := &manifest.Manifest{Format: manifest.FormatVersion, Step: step, Created: time.Now().UTC(), Symlinks: links}
	for _, f := range files {
		key := manifest.DataKey(testPrefix, step, "a1", f.path)
		if _, err := st.Put(ctx, key, bytes.NewReader(f.data), int64(len(f.data)), store.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		m.Files = append(m.Files, manifest.File{Path: f.path, Size: int64(len(f.data)), BLAKE3: b3(f.data), Key: key, Rank: f.rank,
			MTime: manifest.TimeOf(f.mtime)})
	}
	c, _, err := remote.Commit(ctx, st, testPrefix, m)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// putRawManifest stores a manifest without Commit's validation, as a
// hostile or buggy writer could.
func putRawManifest(t *testing.T, st store.Store, m *manifest.Manifest) {
	t.Helper()
	data, err := manifest.Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	key := manifest.ManifestKey(testPrefix, m.Step)
	if _, err := st.Put(context.Background(), key, bytes.NewReader(data), int64(len(data)), store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
}

// overwrite replaces an object's bytes.
func overwrite(t testing.TB, st store.Store, key string, data []byte) {
	t.Helper()
	if _, err := st.Put(context.Background(), key, bytes.NewReader(data), int64(len(data)), store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
}

// getCall records one Get.
type getCall struct {
	key         string
	off, length int64
}

// hookStore wraps a store, records every Get and lets a test wrap bodies
// (n is the 0-based number of the Get of that key).
type hookStore struct {
	store.Store
	body func(key string, off int64, n int, rc io.ReadCloser) io.ReadCloser

	mu     sync.Mutex
	calls  []getCall
	perKey map[string]int
}

func (h *hookStore) Get(ctx context.Context, key string, off, length int64) (io.ReadCloser, error) {
	h.mu.Lock()
	if h.perKey == nil {
		h.perKey = map[string]int{}
	}
	n := h.perKey[key]
	h.perKey[key]++
	h.calls = append(h.calls, getCall{key, off, length})
	h.mu.Unlock()
	rc, err := h.Store.Get(ctx, key, off, length)
	if err != nil || h.body == nil {
		return rc, err
	}
	return h.body(key, off, n, rc), nil
}

func (h *hookStore) gets(key string) []getCall {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []getCall
	for _, c := range h.calls {
		if c.key == key {
			out = append(out, c)
		}
	}
	return out
}

func (h *hookStore) dataGets() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, c := range h.calls {
		if strings.Contains(c.key, "/data/") {
			n++
		}
	}
	return n
}

// readCloser joins a reader with a closer.
type readCloser struct {
	io.Reader
	io.Closer
}

// tree returns every path under dir (relative, slash-separated) with "/"
// appended to directories and "@" + target for symlinks.
func tree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == dir {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			rel += "@" + target
		case d.IsDir():
			rel += "/"
		}
		out = append(out, rel)
		return nil
	})
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

// assertNoTemps fails if any temp file of ours is under dir.
func assertNoTemps(t *testing.T, dir string) {
	t.Helper()
	for _, p := range tree(t, dir) {
		if tempOf(filepath.Base(p)) != "" {
			t.Errorf("temp file left behind: %s", p)
		}
	}
}

// assertFile checks a regular file's content.
func assertFile(t *testing.T, path string, want []byte) {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if !fi.Mode().IsRegular() {
		t.Fatalf("%s: not a regular file: %v", path, fi.Mode())
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: content differs: %d bytes, BLAKE3 %s; want %d bytes, BLAKE3 %s", path, len(got), b3(got), len(want), b3(want))
	}
}

func assertAbsent(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Fatalf("%s: exists (err %v), want absent", path, err)
	}
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// directSupported reports whether files in dir can be written with direct
// I/O, so tests know which path a restore there takes.
func directSupported(t *testing.T, dir string) bool {
	t.Helper()
	f, err := os.CreateTemp(dir, "probe")
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	return enableDirect(f) > 0
}
