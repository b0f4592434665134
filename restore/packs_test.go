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
	"testing"
	"time"

	"github.com/ferrylabs/ferry/internal/remote"
	"github.com/ferrylabs/ferry/internal/s3test"
	"github.com/ferrylabs/ferry/internal/steptest"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/manifest"
	"github.com/ferrylabs/ferry/uploader"
)

// commitPacked commits files as step, files[i] in pack packOf[i] (-1: an
// object of its own), each pack the concatenation of its files in order.
func commitPacked(t testing.TB, st store.Store, step int64, files []tfile, packOf []int) *manifest.Manifest {
	t.Helper()
	ctx := context.Background()
	m := &manifest.Manifest{Format: manifest.FormatVersion, Step: step, Created: time.Now().UTC(), Files: make([]manifest.File, len(files))}
	members := map[int][]int{} // by pack, the indexes of its files in order
	for i, f := range files {
		if p := packOf[i]; p >= 0 {
			members[p] = append(members[p], i)
			continue
		}
		key := manifest.DataKey(testPrefix, step, "a1", f.path)
		m.Files[i] = steptest.Entry(key, steptest.File{Path: f.path, Data: f.data})
		overwrite(t, st, key, f.data)
	}
	for p, idx := range members {
		key := manifest.PackKey(testPrefix, step, "a1", fmt.Sprint(p))
		in := make([]steptest.File, len(idx))
		for j, i := range idx {
			in[j] = steptest.File{Path: files[i].path, Data: files[i].data}
		}
		entries, pack := steptest.Pack(key, 0, in...)
		for j, i := range idx {
			m.Files[i] = entries[j]
		}
		overwrite(t, st, key, pack)
	}
	for i := range m.Files {
		m.Files[i].Rank = files[i].rank
	}
	c, _, err := remote.Commit(ctx, st, testPrefix, m)
	if err != nil {
		t.Fatal(err)
	}
	if c == nil {
		c = m
	}
	return c
}

// smallFiles returns n files of up to 40 KiB (some empty) in 4 rank folders.
func smallFiles(n int) ([]tfile, []int) {
	files := make([]tfile, n)
	packOf := make([]int, n)
	for i := range files {
		size := (i * 7919) % (40 << 10)
		if i%17 == 0 {
			size = 0
		}
		files[i] = tfile{path: fmt.Sprintf("rank%d/shard_%04d.distcp", i%4, i), data: randBytes(size, uint64(i+1)), rank: rank(i % 4)}
		packOf[i] = i % 4
	}
	return files, packOf
}

// TestRestorePackedRuns: packed files come back byte for byte with one GET
// per run, a restore of one rank reads only its pack's runs, and files in
// place are kept.
func TestRestorePackedRuns(t *testing.T) {
	files, packOf := smallFiles(200)
	files = append(files, tfile{path: "model.pt", data: randBytes(3*mib, 99)})
	packOf = append(packOf, -1)
	st := &hookStore{Store: store.NewMemStore()}
	m := commitPacked(t, st, 5, files, packOf)
	if m.Format != manifest.PackedFormat {
		t.Fatalf("format %q", m.Format)
	}
	dir := t.TempDir()
	res, err := Restore(context.Background(), Options{Store: st, Prefix: testPrefix, Dir: dir, Step: 5, ChunkSize: mib})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		assertFile(t, filepath.Join(dir, f.path), f.data)
	}
	assertNoTemps(t, dir)
	if res.Downloaded != len(files) {
		t.Errorf("downloaded %d files, want %d", res.Downloaded, len(files))
	}
	packGets := 0
	for p := range 4 {
		packGets += len(st.gets(manifest.PackKey(testPrefix, 5, "a1", fmt.Sprint(p))))
	}
	// 4 packs of about 1 MiB each: each is one run.
	if packGets != 4 {
		t.Errorf("%d GETs of packs for 200 packed files, want 4 (one per run)", packGets)
	}
	if got := res.BytesDownloaded; got != res.Bytes {
		t.Errorf("bytes downloaded %d, want %d", got, res.Bytes)
	}

	// One rank: only its pack is read.
	st.calls = nil
	dir1 := t.TempDir()
	_, err = Restore(context.Background(), Options{Store: st, Prefix: testPrefix, Dir: dir1, Step: 5, ChunkSize: mib, Ranks: func(r *int) bool { return r != nil && *r == 2 }})
	if err != nil {
		t.Fatal(err)
	}
	for i, f := range files {
		if path := filepath.Join(dir1, f.path); packOf[i] == 2 || packOf[i] == -1 {
			assertFile(t, path, f.data)
		} else {
			assertAbsent(t, path)
		}
	}
	for _, c := range st.calls {
		if strings.Contains(c.key, ".pack-") && !strings.HasSuffix(c.key, ".pack-2") {
			t.Errorf("restore of rank 2 read %s", c.key)
		}
	}

	// Two files changed on disk, one removed: those three are fetched, in
	// one GET per run that holds them; the rest is kept.
	writeFile(t, filepath.Join(dir, files[5].path), []byte("changed"))
	writeFile(t, filepath.Join(dir, files[9].path), bytes.Repeat([]byte{1}, len(files[9].data)))
	os.Remove(filepath.Join(dir, files[14].path))
	st.calls = nil
	res, err = Restore(context.Background(), Options{Store: st, Prefix: testPrefix, Dir: dir, Step: 5, ChunkSize: mib})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		assertFile(t, filepath.Join(dir, f.path), f.data)
	}
	if res.Downloaded != 3 || res.Kept != len(files)-3 {
		t.Errorf("downloaded %d, kept %d; want 3 and %d", res.Downloaded, res.Kept, len(files)-3)
	}
	// files 5 and 9 are in pack 1, 14 in pack 2.
	if n := st.dataGets(); n != 2 {
		t.Errorf("%d GETs, want 2 (one per run holding a file to fetch)", n)
	}
}

// TestRestorePackedFaults: a run whose body breaks, and a packed file whose
// bytes are wrong, are fetched again on their own; a file wrong in the
// pack itself fails the restore naming it, and leaves nothing at its path.
func TestRestorePackedFaults(t *testing.T) {
	files, packOf := smallFiles(40)
	for i := range packOf {
		packOf[i] = 0
	}
	broken := errors.New("connection reset by peer")
	flip := true
	st := &hookStore{Store: store.NewMemStore()}
	m := commitPacked(t, st, 6, files, packOf)
	pack := m.Files[0].Key
	st.body = func(key string, off int64, n int, rc io.ReadCloser) io.ReadCloser {
		if key == pack && n == 0 {
			return readCloser{&breakingBody{r: rc, n: 100 << 10, err: broken}, rc}
		}
		return rc
	}
	dir := t.TempDir()
	if _, err := Restore(context.Background(), Options{Store: st, Prefix: testPrefix, Dir: dir, Step: 6}); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		assertFile(t, filepath.Join(dir, f.path), f.data)
	}
	assertNoTemps(t, dir)

	// A byte flipped in transit in the run: that file is fetched again.
	victim := 7
	st.body = func(key string, off int64, n int, rc io.ReadCloser) io.ReadCloser {
		if key != pack || !flip || off != 0 {
			return rc
		}
		flip = false
		data, _ := io.ReadAll(rc)
		data[m.Files[victim].Offset] ^= 1
		return io.NopCloser(bytes.NewReader(data))
	}
	dir = t.TempDir()
	if _, err := Restore(context.Background(), Options{Store: st, Prefix: testPrefix, Dir: dir, Step: 6}); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		assertFile(t, filepath.Join(dir, f.path), f.data)
	}
	if gets := st.gets(pack); gets[len(gets)-1].off != m.Files[victim].Offset || gets[len(gets)-1].length != m.Files[victim].Size {
		t.Errorf("last GET of the pack %+v, want the victim's range alone", gets[len(gets)-1])
	}

	// The pack itself is wrong for one file: the restore fails naming it.
	bad, _ := io.ReadAll(must(st.Store.Get(context.Background(), pack, 0, -1)))
	bad[m.Files[victim].Offset] ^= 1
	st.body = nil
	overwrite(t, st, pack, bad)
	dir = t.TempDir()
	_, err := Restore(context.Background(), Options{Store: st, Prefix: testPrefix, Dir: dir, Step: 6})
	if !errors.Is(err, ErrHashMismatch) || !strings.Contains(err.Error(), files[victim].path) {
		t.Fatalf("got %v, want a BLAKE3 mismatch naming %s", err, files[victim].path)
	}
	assertAbsent(t, filepath.Join(dir, files[victim].path))
	assertNoTemps(t, dir)
}

func must(rc io.ReadCloser, err error) io.ReadCloser {
	if err != nil {
		panic(err)
	}
	return rc
}

// TestRestorePackedPushFromS3: what the uploader packs (against versitygw)
// restores byte for byte with a few GETs, and the dry run counts them.
func TestRestorePackedPushFromS3(t *testing.T) {
	srv := s3test.Shared(t)
	st := srv.Store(t, srv.NewBucket(t))
	src := t.TempDir()
	files, _ := smallFiles(300)
	for _, f := range files {
		writeFile(t, filepath.Join(src, f.path), f.data)
	}
	big := randBytes(5*mib, 7)
	writeFile(t, filepath.Join(src, "model.pt"), big)
	m := steptest.Push(t, st, testPrefix, src, 9, uploader.PushOptions{})
	packed, keys := 0, map[string]bool{}
	for _, f := range m.Files {
		if f.Packed() {
			packed++
			keys[f.Key] = true
		}
	}
	if packed != len(files) || len(keys) > 8 {
		t.Fatalf("%d of %d small files packed into %d packs", packed, len(files), len(keys))
	}
	h := &hookStore{Store: st}
	dir := t.TempDir()
	plan, err := Restore(context.Background(), Options{Store: h, Prefix: testPrefix, Dir: dir, Step: 9, PlanOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	res, err := Restore(context.Background(), Options{Store: h, Prefix: testPrefix, Dir: dir, Step: 9})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		assertFile(t, filepath.Join(dir, f.path), f.data)
	}
	assertFile(t, filepath.Join(dir, "model.pt"), big)
	if got, want := int64(h.dataGets()), plan.Plan.GETs; got != want || got > int64(len(keys))+1 {
		t.Errorf("%d data GETs, dry run said %d; want at most %d", got, want, len(keys)+1)
	}
	if res.Downloaded != len(files)+1 {
		t.Errorf("downloaded %d", res.Downloaded)
	}
}
