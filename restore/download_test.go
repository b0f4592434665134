package restore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/manifest"
)

func TestCorruptObject(t *testing.T) {
	st := &hookStore{Store: store.NewMemStore()}
	data := randBytes(2*mib+5, 1)
	m := commit(t, st, 1000, []tfile{{path: "rank0.pt", data: data}}, nil)
	bad := bytes.Clone(data)
	bad[mib+3] ^= 0xff
	overwrite(t, st, m.Files[0].Key, bad)
	dir := t.TempDir()

	_, err := Restore(context.Background(), Options{Store: st, Prefix: testPrefix, Dir: dir, Step: 1000, ChunkSize: mib})
	want := fmt.Sprintf("restore step 1000: restore rank0.pt: BLAKE3 mismatch: got %s, manifest says %s", b3(bad), b3(data))
	if err == nil || err.Error() != want || !errors.Is(err, ErrHashMismatch) {
		t.Fatalf("got %v\nwant %s", err, want)
	}
	if n := len(st.gets(m.Files[0].Key)); n != 6 {
		t.Errorf("%d GETs, want 3 chunks downloaded twice", n)
	}
	assertAbsent(t, filepath.Join(dir, "rank0.pt"))
	assertNoTemps(t, dir)
}

func TestCorruptObjectKeepsOldFile(t *testing.T) {
	st := store.NewMemStore()
	data := randBytes(1000, 1)
	m := commit(t, st, 1, []tfile{{path: "x.pt", data: data}}, nil)
	overwrite(t, st, m.Files[0].Key, randBytes(1000, 2))
	dir := t.TempDir()
	old := []byte("previous checkpoint")
	writeFile(t, filepath.Join(dir, "x.pt"), old)
	_, err := Restore(context.Background(), Options{Store: st, Prefix: testPrefix, Dir: dir, Step: 1})
	if !errors.Is(err, ErrHashMismatch) {
		t.Fatalf("got %v, want a BLAKE3 mismatch", err)
	}
	assertFile(t, filepath.Join(dir, "x.pt"), old)
	assertNoTemps(t, dir)
}

// A byte flipped in transit (by a proxy, say) costs one more download of the
// file, not the restore.
func TestFlippedByteInTransitIsRetried(t *testing.T) {
	data := randBytes(3*mib, 1)
	st := &hookStore{Store: store.NewMemStore(), body: func(key string, off int64, n int, rc io.ReadCloser) io.ReadCloser {
		if off != mib || n >= 3 { // only during the first download
			return rc
		}
		b, _ := io.ReadAll(rc)
		b[10] ^= 1
		return readCloser{bytes.NewReader(b), rc}
	}}
	m := commit(t, st, 1, []tfile{{path: "rank0.pt", data: data}}, nil)
	dir := t.TempDir()
	res, err := Restore(context.Background(), Options{Store: st, Prefix: testPrefix, Dir: dir, Step: 1, ChunkSize: mib})
	if err != nil {
		t.Fatal(err)
	}
	assertFile(t, filepath.Join(dir, "rank0.pt"), data)
	if n := len(st.gets(m.Files[0].Key)); n != 6 || res.BytesDownloaded != 2*int64(len(data)) {
		t.Errorf("%d GETs, %d bytes: want the file downloaded twice", n, res.BytesDownloaded)
	}
	assertNoTemps(t, dir)
}

func TestWrongSize(t *testing.T) {
	for _, tc := range []struct {
		name   string
		stored []byte
		want   string
	}{
		{"shorter", randBytes(mib+10, 1)[:mib+5], "object ended at byte"},
		{"much shorter", randBytes(10, 1), ""}, // which chunk fails first varies
		{"longer", append(randBytes(mib+10, 1), 0), "longer than the manifest"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := store.NewMemStore()
			m := commit(t, st, 1000, []tfile{{path: "rank0.pt", data: randBytes(mib+10, 1)}}, nil)
			overwrite(t, st, m.Files[0].Key, tc.stored)
			dir := t.TempDir()
			_, err := Restore(context.Background(), Options{Store: st, Prefix: testPrefix, Dir: dir, Step: 1000, ChunkSize: mib})
			if err == nil || !strings.HasPrefix(err.Error(), "restore step 1000: download rank0.pt: ") || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want a download error naming rank0.pt and %q", err, tc.want)
			}
			assertAbsent(t, filepath.Join(dir, "rank0.pt"))
			assertNoTemps(t, dir)
		})
	}
}

func TestMissingObject(t *testing.T) {
	st := store.NewMemStore()
	m := commit(t, st, 1000, []tfile{{path: "a/rank0.pt", data: []byte("x")}}, nil)
	st.Delete(context.Background(), m.Files[0].Key)
	dir := t.TempDir()
	_, err := Restore(context.Background(), Options{Store: st, Prefix: testPrefix, Dir: dir, Step: 1000})
	if !errors.Is(err, store.ErrNotExist) || !strings.HasPrefix(err.Error(), "restore step 1000: download a/rank0.pt: ") {
		t.Fatalf("got %v", err)
	}
	if got := tree(t, dir); len(got) != 0 {
		t.Errorf("target holds %v after a failed restore, want it empty", got)
	}
}

// breakingBody returns err after n bytes.
type breakingBody struct {
	r   io.Reader
	n   int
	err error
}

func (b *breakingBody) Read(p []byte) (int, error) {
	if b.n <= 0 {
		return 0, b.err
	}
	if len(p) > b.n {
		p = p[:b.n]
	}
	n, err := b.r.Read(p)
	b.n -= n
	return n, err
}

func TestBodyBreaksMidStream(t *testing.T) {
	data := randBytes(3*mib+100, 1)
	broken := errors.New("connection reset by peer")
	st := &hookStore{Store: store.NewMemStore(), body: func(key string, off int64, n int, rc io.ReadCloser) io.ReadCloser {
		if off%mib != 0 {
			return rc // a re-GET of the remaining range
		}
		return readCloser{&breakingBody{r: rc, n: 300 << 10, err: broken}, rc}
	}}
	m := commit(t, st, 1, []tfile{{path: "rank0.pt", data: data}}, nil)
	dir := t.TempDir()
	res, err := Restore(context.Background(), Options{Store: st, Prefix: testPrefix, Dir: dir, Step: 1, ChunkSize: mib, Concurrency: 2})
	if err != nil {
		t.Fatal(err)
	}
	assertFile(t, filepath.Join(dir, "rank0.pt"), data)
	if res.BytesDownloaded != int64(len(data)) {
		t.Errorf("%d bytes downloaded, want %d: only the missing ranges again", res.BytesDownloaded, len(data))
	}
	resumed := map[int64]int64{}
	for _, g := range st.gets(m.Files[0].Key) {
		if g.off%mib != 0 {
			resumed[g.off] = g.length
		}
	}
	// Each 1 MiB chunk broke after 300 KiB and was fetched on from there;
	// the last chunk, 100 bytes, never broke.
	want := map[int64]int64{300 << 10: mib - 300<<10, mib + 300<<10: mib - 300<<10, 2*mib + 300<<10: mib - 300<<10}
	if fmt.Sprint(resumed) != fmt.Sprint(want) {
		t.Errorf("re-GETs (offset: length) %v, want %v", resumed, want)
	}
}

func TestBodyKeepsBreaking(t *testing.T) {
	st := &hookStore{Store: store.NewMemStore(), body: func(key string, off int64, n int, rc io.ReadCloser) io.ReadCloser {
		if !strings.Contains(key, "/data/") {
			return rc
		}
		return readCloser{&breakingBody{r: rc, n: 0, err: io.ErrUnexpectedEOF}, rc}
	}}
	commit(t, st, 1, []tfile{{path: "rank0.pt", data: randBytes(100, 1)}}, nil)
	dir := t.TempDir()
	_, err := Restore(context.Background(), Options{Store: st, Prefix: testPrefix, Dir: dir, Step: 1})
	if !errors.Is(err, io.ErrUnexpectedEOF) || !strings.Contains(err.Error(), "download rank0.pt: bytes 0-99") {
		t.Fatalf("got %v", err)
	}
	if n := len(st.gets(manifest.DataKey(testPrefix, 1, "a1", "rank0.pt"))); n != 1+maxChunkRetries {
		t.Errorf("%d GETs, want %d", n, 1+maxChunkRetries)
	}
	assertNoTemps(t, dir)
}

// A body that delivers the file's bytes before the extra one must not let
// the file be placed before the GET has seen the object's end.
func TestLongerObjectTrickled(t *testing.T) {
	data := randBytes(100, 1)
	st := &hookStore{Store: store.NewMemStore(), body: func(key string, off int64, n int, rc io.ReadCloser) io.ReadCloser {
		if !strings.Contains(key, "/data/") {
			return rc
		}
		// The file's 100 bytes now, the object's extra byte a little later.
		return readCloser{io.MultiReader(io.LimitReader(rc, 100), &slowReader{rc, 100 * time.Millisecond}), rc}
	}}
	m := commit(t, st, 1, []tfile{{path: "x", data: data}}, nil)
	overwrite(t, st, m.Files[0].Key, append(bytes.Clone(data), 1))
	dir := t.TempDir()
	_, err := Restore(context.Background(), Options{Store: st, Prefix: testPrefix, Dir: dir, Step: 1})
	if !errors.Is(err, errTooLong) {
		t.Fatalf("got %v, want the object reported longer", err)
	}
	assertAbsent(t, filepath.Join(dir, "x"))
	assertNoTemps(t, dir)
}

// slowReader waits before each read.
type slowReader struct {
	r     io.Reader
	delay time.Duration
}

func (s *slowReader) Read(p []byte) (int, error) {
	time.Sleep(s.delay)
	return s.r.Read(p)
}

// The manifest's hashes are what b3sum prints; check against the published
// BLAKE3 values rather than the library used to compute them.
func TestHashIsB3sum(t *testing.T) {
	st := store.NewMemStore()
	m := commit(t, st, 1, []tfile{{path: "empty", data: nil}, {path: "abc", data: []byte("abc")}}, nil)
	for i, want := range []string{
		"af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262",
		"6437b3ac38465133ffb63b75273a8db548c558465d79db03fd359c6cd5bd9d85",
	} {
		if m.Files[i].BLAKE3 != want {
			t.Errorf("%s: BLAKE3 %s, b3sum says %s", m.Files[i].Path, m.Files[i].BLAKE3, want)
		}
	}
	if _, err := Restore(context.Background(), Options{Store: st, Prefix: testPrefix, Dir: t.TempDir(), Step: 1}); err != nil {
		t.Fatal(err)
	}
}

// slowBody delays its first read, so chunks of one file end out of order.
type slowBody struct {
	io.ReadCloser
	d    time.Duration
	once sync.Once
}

func (b *slowBody) Read(p []byte) (int, error) {
	b.once.Do(func() { time.Sleep(b.d) })
	return b.ReadCloser.Read(p)
}

// TestChunksHashedOutOfOrder restores a file whose chunks arrive last to
// first, with a chunk size that is not a power of two (rounded down to one):
// the hash is assembled from per-chunk subtrees and must still match.
func TestChunksHashedOutOfOrder(t *testing.T) {
	data := randBytes(9*mib+4321, 7)
	st := &hookStore{Store: store.NewMemStore(), body: func(key string, off int64, n int, rc io.ReadCloser) io.ReadCloser {
		// Earlier chunks wait longer: chunk 0 starts writing last.
		return &slowBody{ReadCloser: rc, d: time.Duration(10-off/mib) * 15 * time.Millisecond}
	}}
	m := commit(t, st, 1, []tfile{{path: "rank0.pt", data: data}}, nil)
	dir := t.TempDir()
	res, err := Restore(context.Background(), Options{Store: st, Prefix: testPrefix, Dir: dir, Step: 1, ChunkSize: mib + mib/2, Concurrency: 10})
	if err != nil {
		t.Fatal(err)
	}
	assertFile(t, filepath.Join(dir, "rank0.pt"), data)
	if res.Downloaded != 1 || res.BytesDownloaded != int64(len(data)) {
		t.Errorf("result %+v", res)
	}
	g := st.gets(m.Files[0].Key)
	if len(g) != 10 {
		t.Fatalf("%d GETs, want 10 of 1 MiB (1.5 MiB rounds down)", len(g))
	}
	for _, c := range g {
		if c.off%mib != 0 || (c.length != mib && c.off != 9*mib) {
			t.Errorf("GET at %d of %d bytes: not a 1 MiB-aligned chunk", c.off, c.length)
		}
	}
}

// TestBodyBreaksInsideABlock: a body that breaks 100 bytes into a disk
// block. With direct I/O only whole blocks are written, so the partial one
// is fetched again from the block boundary; through the page cache the
// re-GET starts at the exact byte. Either way the file is whole and its
// hash checked, which would fail if any byte were hashed twice or skipped.
func TestBodyBreaksInsideABlock(t *testing.T) {
	for _, buffered := range []bool{false, true} {
		t.Run(fmt.Sprintf("buffered=%v", buffered), func(t *testing.T) {
			data := randBytes(2*mib+5000, 3)
			const breakAt = 300<<10 + 100
			st := &hookStore{Store: store.NewMemStore(), body: func(key string, off int64, n int, rc io.ReadCloser) io.ReadCloser {
				if off%mib != 0 {
					return rc // a re-GET of the remaining range
				}
				return readCloser{&breakingBody{r: rc, n: breakAt, err: errors.New("connection reset by peer")}, rc}
			}}
			m := commit(t, st, 1, []tfile{{path: "rank0.pt", data: data}}, nil)
			dir := t.TempDir()
			res, err := Restore(context.Background(), Options{Store: st, Prefix: testPrefix, Dir: dir, Step: 1, ChunkSize: mib, Concurrency: 3, DirectIO: !buffered})
			if err != nil {
				t.Fatal(err)
			}
			assertFile(t, filepath.Join(dir, "rank0.pt"), data)
			resumeAt := int64(breakAt)
			if res.Direct == 1 {
				resumeAt = breakAt &^ (defaultDirectAlign - 1)
			} else if !buffered && directSupported(t, dir) {
				t.Fatalf("direct I/O works in %s but the restore did not use it: %+v", dir, res)
			}
			var resumed []int64
			for _, g := range st.gets(m.Files[0].Key) {
				if g.off%mib != 0 {
					resumed = append(resumed, g.off%mib)
				}
			}
			if len(resumed) != 2 {
				t.Fatalf("re-GETs at chunk offsets %v, want one per full chunk (the 5000-byte last one never breaks)", resumed)
			}
			for _, off := range resumed {
				if off != resumeAt {
					t.Errorf("re-GET at offset %d into its chunk, want %d (direct files: %d)", off, resumeAt, res.Direct)
				}
			}
		})
	}
}

// TestDirectIOUsedWhereSupported checks that a restore with DirectIO writes
// with direct I/O on a filesystem that has it (ext4, xfs...), that a file
// whose size is not a whole number of blocks comes out exactly its size,
// and that a default restore writes through the page cache.
func TestDirectIOUsedWhereSupported(t *testing.T) {
	dir := t.TempDir()
	if !directSupported(t, dir) {
		t.Skipf("no direct I/O on the filesystem of %s", dir)
	}
	st := store.NewMemStore()
	files := []tfile{{path: "a.pt", data: randBytes(3*mib+1, 1)}, {path: "b.pt", data: randBytes(4095, 2)}, {path: "c.pt", data: randBytes(8192, 3)}}
	commit(t, st, 1, files, nil)
	res, err := Restore(context.Background(), Options{Store: st, Prefix: testPrefix, Dir: dir, Step: 1, ChunkSize: mib, DirectIO: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Direct != len(files) {
		t.Errorf("%d of %d files written with direct I/O", res.Direct, len(files))
	}
	for _, f := range files {
		assertFile(t, filepath.Join(dir, f.path), f.data)
	}
	dir = t.TempDir()
	if res, err = Restore(context.Background(), Options{Store: st, Prefix: testPrefix, Dir: dir, Step: 1, ChunkSize: mib}); err != nil {
		t.Fatal(err)
	}
	if res.Direct != 0 {
		t.Errorf("a default restore wrote %d files with direct I/O, want none (page cache)", res.Direct)
	}
	for _, f := range files {
		assertFile(t, filepath.Join(dir, f.path), f.data)
	}
}

// TestBodyTricklesAndBreaks: every body delivers 8 KiB and breaks. Each GET
// makes progress, so the no-progress retry limit never trips, but a chunk
// gets at most maxChunkRequests (+1 per 2 MiB) GETs: the restore fails with the error,
// leaves nothing behind, and does not trickle on for 128 GETs.
func TestBodyTricklesAndBreaks(t *testing.T) {
	broken := errors.New("connection reset by peer")
	st := &hookStore{Store: store.NewMemStore(), body: func(key string, off int64, n int, rc io.ReadCloser) io.ReadCloser {
		if !strings.Contains(key, "/data/") {
			return rc
		}
		return readCloser{&breakingBody{r: rc, n: 8 << 10, err: broken}, rc}
	}}
	m := commit(t, st, 1, []tfile{{path: "rank0.pt", data: randBytes(mib, 1)}}, nil)
	dir := t.TempDir()
	_, err := Restore(context.Background(), Options{Store: st, Prefix: testPrefix, Dir: dir, Step: 1, ChunkSize: mib})
	if !errors.Is(err, broken) || !strings.Contains(err.Error(), "download rank0.pt: bytes ") || !strings.Contains(err.Error(), "giving up after 32 GETs") {
		t.Fatalf("got %v", err)
	}
	if n := len(st.gets(m.Files[0].Key)); n != maxChunkRequests {
		t.Errorf("%d GETs, want %d", n, maxChunkRequests)
	}
	assertNoTemps(t, dir)
	if _, err := os.Stat(filepath.Join(dir, "rank0.pt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("rank0.pt exists after the failed restore: %v", err)
	}
}
