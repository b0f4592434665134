package verify

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ferrylabs/ferry/internal/s3test"
	"github.com/ferrylabs/ferry/internal/steptest"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/manifest"
	"github.com/ferrylabs/ferry/uploader"
)

func TestMain(m *testing.M) { s3test.Main(m) }

// counting counts the requests verify makes, by kind.
type counting struct {
	store.Store
	lists, heads, gets atomic.Int64
}

func (c *counting) List(ctx context.Context, prefix, after string, max int, fn func(store.ObjectInfo) error) error {
	c.lists.Add(1)
	return c.Store.List(ctx, prefix, after, max, fn)
}

func (c *counting) Head(ctx context.Context, key string) (store.ObjectInfo, error) {
	c.heads.Add(1)
	return c.Store.Head(ctx, key)
}

func (c *counting) Get(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	c.gets.Add(1)
	return c.Store.Get(ctx, key, off, n)
}

// pushStep commits step n of the files under dir and returns its manifest.
func pushStep(t *testing.T, st store.Store, dir string, n int64) *manifest.Manifest {
	t.Helper()
	return steptest.Push(t, st, "run", dir, n, uploader.PushOptions{Upload: uploader.Options{PartSize: 5 << 20}})
}

func writeFiles(t *testing.T, dir string, sizes ...int) {
	t.Helper()
	for i, n := range sizes {
		data := bytes.Repeat([]byte{byte(i + 1)}, n)
		for j := range data {
			data[j] ^= byte(j * 7)
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("rank%d.pt", i)), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// A healthy step passes with every byte read; each kind of damage is found
// and named: an object deleted, truncated, overwritten with other bytes of
// the same size (only when the data is read), a shard deleted.
func TestVerifyFindsDamage(t *testing.T) {
	srv := s3test.Shared(t)
	cases := []struct {
		name   string
		damage func(t *testing.T, st store.Store, m *manifest.Manifest)
		share  float64
		want   string // problem kind, "" for none
	}{
		{"healthy", func(*testing.T, store.Store, *manifest.Manifest) {}, 1, ""},
		{"object deleted", func(t *testing.T, st store.Store, m *manifest.Manifest) {
			if err := st.Delete(t.Context(), m.Files[1].Key); err != nil {
				t.Fatal(err)
			}
		}, 0, Missing},
		{"object truncated", func(t *testing.T, st store.Store, m *manifest.Manifest) {
			put(t, st, m.Files[1].Key, make([]byte, m.Files[1].Size-1))
		}, 0, WrongSize},
		{"same size, other bytes, not read", func(t *testing.T, st store.Store, m *manifest.Manifest) {
			put(t, st, m.Files[1].Key, make([]byte, m.Files[1].Size))
		}, 0, ""},
		{"same size, other bytes, read", func(t *testing.T, st store.Store, m *manifest.Manifest) {
			put(t, st, m.Files[1].Key, make([]byte, m.Files[1].Size))
		}, 1, WrongHash},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := srv.Store(t, srv.NewBucket(t))
			dir := t.TempDir()
			writeFiles(t, dir, 3<<20, 12<<20+5, 0, 1000)
			m := pushStep(t, st, dir, 10)
			tc.damage(t, st, m)
			reps, err := Verify(t.Context(), Options{Store: st, Prefix: "run", Steps: []int64{10}, ReadShare: tc.share})
			if err != nil || len(reps) != 1 {
				t.Fatalf("Verify: %+v, %v", reps, err)
			}
			rep := reps[0]
			if tc.want == "" {
				if !rep.OK() {
					t.Fatalf("problems in a step with none: %v", rep.Problems)
				}
				if tc.share == 1 && (rep.FilesRead != 4 || rep.BytesRead != rep.Bytes) {
					t.Errorf("read %d files, %d bytes; want all 4, %d", rep.FilesRead, rep.BytesRead, rep.Bytes)
				}
				return
			}
			if len(rep.Problems) != 1 || rep.Problems[0].Kind != tc.want || rep.Problems[0].Path != "rank1.pt" {
				t.Fatalf("problems %v; want one %q for rank1.pt", rep.Problems, tc.want)
			}
		})
	}
}

func put(t *testing.T, st store.Store, key string, data []byte) {
	t.Helper()
	if _, err := st.Put(t.Context(), key, bytes.NewReader(data), int64(len(data)), store.PutOptions{CRC32C: store.CRC32C(data)}); err != nil {
		t.Fatal(err)
	}
}

// A sharded manifest whose shard is gone is a manifest problem, named.
func TestVerifyShardDeleted(t *testing.T) {
	defer manifest.SetShardThresholds(1, 2)()
	srv := s3test.Shared(t)
	st := srv.Store(t, srv.NewBucket(t))
	dir := t.TempDir()
	writeFiles(t, dir, 100, 200, 300, 400, 500)
	m := pushStep(t, st, dir, 3)
	if !m.Sharded() {
		t.Fatal("manifest not sharded; the test needs shards")
	}
	var shardKey string
	_ = st.List(t.Context(), "run/", "", 0, func(o store.ObjectInfo) error {
		if strings.Contains(o.Key, "shard") && shardKey == "" {
			shardKey = o.Key
		}
		return nil
	})
	if shardKey == "" {
		t.Fatal("no shard object found under run/")
	}
	if err := st.Delete(t.Context(), shardKey); err != nil {
		t.Fatal(err)
	}
	reps, err := Verify(t.Context(), Options{Store: st, Prefix: "run", Steps: []int64{3}})
	if err != nil {
		t.Fatal(err)
	}
	if len(reps[0].Problems) != 1 || reps[0].Problems[0].Kind != Manifest {
		t.Fatalf("problems %v; want one manifest problem", reps[0].Problems)
	}
}

// A 1,000-file step is checked with a LIST per folder, not a HEAD per
// object, and its data read with one GET per file of under a range.
func TestVerifyRequestCounts(t *testing.T) {
	srv := s3test.Shared(t)
	st := &counting{Store: srv.Store(t, srv.NewBucket(t))}
	dir := t.TempDir()
	sizes := make([]int, 1000)
	for i := range sizes {
		sizes[i] = 100 + i
	}
	writeFiles(t, dir, sizes...)
	pushStep(t, st, dir, 1)
	st.lists.Store(0)
	reps, err := Verify(t.Context(), Options{Store: st, Prefix: "run", Steps: []int64{1}, ReadShare: 1})
	if err != nil || !reps[0].OK() {
		t.Fatalf("Verify: %+v, %v", reps, err)
	}
	// The manifest's GET, then one LIST of the attempt's folder (1,000
	// keys: one or two pages), then a GET per file.
	if l, h, g := st.lists.Load(), st.heads.Load(), st.gets.Load(); l > 2 || h != 0 {
		t.Errorf("requests: %d LIST, %d HEAD, %d GET; want at most 2 LIST and no HEAD", l, h, g)
	} else {
		t.Logf("1,000-file step: %d LIST, %d HEAD, %d GET (manifest included)", l, h, g)
	}
}

// A file of several ranges hashes right when whole (the ranges' subtrees
// combine into the file's BLAKE3), and one byte changed in its middle
// range is found.
func TestVerifyMultiRangeFile(t *testing.T) {
	srv := s3test.Shared(t)
	st := srv.Store(t, srv.NewBucket(t))
	dir := t.TempDir()
	writeFiles(t, dir, 2*DefaultRangeSize+12345)
	m := pushStep(t, st, dir, 4)
	opts := Options{Store: st, Prefix: "run", Steps: []int64{4}, ReadShare: 1}
	reps, err := Verify(t.Context(), opts)
	if err != nil || !reps[0].OK() || reps[0].FilesRead != 1 {
		t.Fatalf("healthy 3-range file: %+v, %v", reps, err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "rank0.pt"))
	if err != nil {
		t.Fatal(err)
	}
	data[DefaultRangeSize+7] ^= 1
	put(t, st, m.Files[0].Key, data)
	reps, err = Verify(t.Context(), opts)
	if err != nil || len(reps[0].Problems) != 1 || reps[0].Problems[0].Kind != WrongHash {
		t.Fatalf("one byte changed in the middle range: %+v, %v; want one wrong hash", reps, err)
	}
}
