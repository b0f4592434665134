package remote

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/internal/s3test"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/manifest"
)

func TestMain(m *testing.M) { s3test.Main(m) }

// heads counts HEAD requests.
type heads struct {
	store.Store
	n atomic.Int64
}

func (h *heads) Head(ctx context.Context, key string) (store.ObjectInfo, error) {
	h.n.Add(1)
	return h.Store.Head(ctx, key)
}

func putObject(t *testing.T, st store.Store, key string, data []byte) {
	t.Helper()
	if _, err := st.Put(t.Context(), key, bytes.NewReader(data), int64(len(data)), store.PutOptions{CRC32C: store.CRC32C(data)}); err != nil {
		t.Fatal(err)
	}
}

// CheckObjects asks for a pack once however many files it holds, compares
// its size with the pack's, and names the pack and its files when it is
// short or gone.
func TestCheckObjectsPacked(t *testing.T) {
	srv := s3test.Shared(t)
	st := &heads{Store: srv.Store(t, srv.NewBucket(t))}
	pack := manifest.PackKey("run", 1, "att", "p1")
	own := manifest.DataKey("run", 1, "att", "big.bin")
	putObject(t, st, pack, []byte("aabbbcccc"))
	putObject(t, st, own, []byte("0123456789"))
	m := &manifest.Manifest{Format: manifest.FormatVersion, Step: 1, Created: time.Now().UTC(), Files: []manifest.File{
		{Path: "a.json", Size: 2, BLAKE3: hashA, Key: pack, PackSize: 9, Offset: 0},
		{Path: "b.json", Size: 3, BLAKE3: hashA, Key: pack, PackSize: 9, Offset: 2},
		{Path: "c.json", Size: 4, BLAKE3: hashA, Key: pack, PackSize: 9, Offset: 5},
		{Path: "big.bin", Size: 10, BLAKE3: hashA, Key: own},
	}}
	if _, ok, err := Commit(t.Context(), st, "run", m); err != nil || !ok {
		t.Fatalf("commit: %v %v", ok, err)
	}
	st.n.Store(0)
	if err := CheckObjects(t.Context(), st, "run"); err != nil {
		t.Fatalf("healthy packed step: %v", err)
	}
	if n := st.n.Load(); n != 2 {
		t.Errorf("%d HEADs for a pack and a file; want 2", n)
	}
	putObject(t, st, pack, []byte("aabbbccc"))
	err := CheckObjects(t.Context(), st, "run")
	if want := "step 1 is committed but pack " + pack + " of a.json, b.json, c.json is 8 bytes, the manifest says 9"; err == nil || err.Error() != want {
		t.Fatalf("truncated pack: %v; want %q", err, want)
	}
	if err := st.Delete(t.Context(), pack); err != nil {
		t.Fatal(err)
	}
	err = CheckObjects(t.Context(), st, "run")
	if err == nil || !errors.Is(err, store.ErrNotExist) || !strings.HasPrefix(err.Error(), "step 1 is committed but pack "+pack+" of a.json, b.json, c.json is missing") {
		t.Fatalf("deleted pack: %v", err)
	}
}
