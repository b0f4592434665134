package restore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/internal/remote"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/manifest"
)

const mib = 1 << 20

// TestRoundTripSizes restores files of every size around a chunk, with
// direct I/O (whole blocks, the last one padded and truncated away) and
// through the page cache.
func TestRoundTripSizes(t *testing.T) {
	for _, buffered := range []bool{false, true} {
		t.Run(fmt.Sprintf("buffered=%v", buffered), func(t *testing.T) { testRoundTripSizes(t, buffered) })
	}
}

func testRoundTripSizes(t *testing.T, buffered bool) {
	st := &hookStore{Store: store.NewMemStore()}
	files := []tfile{
		{path: "empty", data: nil},
		{path: "one", data: []byte{7}},
		{path: "chunk-1", data: randBytes(mib-1, 1)},
		{path: "chunk", data: randBytes(mib, 2)},
		{path: "chunk+1", data: randBytes(mib+1, 3)},
		{path: "several/chunks.bin", data: randBytes(3*mib+12345, 4)},
		{path: "a/b/c/d/e/f/g/h/deep.pt", data: randBytes(10*mib+7, 5)},
		{path: "a/b/c/d/e/f/g/h/empty", data: []byte{}},
	}
	links := []manifest.Symlink{
		{Path: "latest.pt", Target: "a/b/c/d/e/f/g/h/deep.pt"},
		{Path: "several/up", Target: "../chunk"},
	}
	commit(t, st, 1000, files, links)
	dir := filepath.Join(t.TempDir(), "not", "yet", "there")

	var mu sync.Mutex
	var lastDone, lastTotal int64
	res, err := Restore(context.Background(), Options{
		Store: st, Prefix: testPrefix, Dir: dir, Step: LatestStep, Concurrency: 4, ChunkSize: mib, DirectIO: !buffered,
		Progress: func(done, total int64) {
			mu.Lock()
			defer mu.Unlock()
			if done < lastDone {
				t.Errorf("progress went back from %d to %d", lastDone, done)
			}
			lastDone, lastTotal = done, total
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, f := range files {
		assertFile(t, filepath.Join(dir, f.path), f.data)
		total += int64(len(f.data))
	}
	for _, l := range links {
		got, err := os.Readlink(filepath.Join(dir, l.Path))
		if err != nil || got != l.Target {
			t.Errorf("link %s: %q, %v; want %q", l.Path, got, err, l.Target)
		}
	}
	if got, err := os.ReadFile(filepath.Join(dir, "latest.pt")); err != nil || b3(got) != b3(files[6].data) {
		t.Errorf("latest.pt does not resolve to deep.pt: %v", err)
	}
	assertNoTemps(t, dir)
	want := Result{Step: 1000, Files: len(files), Downloaded: len(files), Symlinks: 2, Bytes: total, BytesDownloaded: total}
	if !buffered && directSupported(t, dir) {
		want.Direct = len(files)
	}
	res.Manifest = nil
	if !reflect.DeepEqual(res, want) {
		t.Errorf("result %+v, want %+v", res, want)
	}
	if lastDone != total || lastTotal != total {
		t.Errorf("last progress %d/%d, want %d/%d", lastDone, lastTotal, total, total)
	}
	// Ranged GETs of ChunkSize, the last one asking one byte more; none
	// for empty files.
	g := st.gets(manifest.DataKey(testPrefix, 1000, "a1", "chunk+1"))
	sort.Slice(g, func(i, j int) bool { return g[i].off < g[j].off })
	if len(g) != 2 || g[0] != (getCall{g[0].key, 0, mib}) || g[1] != (getCall{g[1].key, mib, 2}) {
		t.Errorf("GETs of chunk+1: %+v", g)
	}
	if g := st.gets(manifest.DataKey(testPrefix, 1000, "a1", "empty")); len(g) != 0 {
		t.Errorf("GETs of an empty file: %+v", g)
	}
	if n := len(st.gets(manifest.DataKey(testPrefix, 1000, "a1", "a/b/c/d/e/f/g/h/deep.pt"))); n != 11 {
		t.Errorf("%d GETs for a 10 MiB + 7 file in 1 MiB chunks, want 11", n)
	}
}

func TestRestoreGivenStepAndTargetSymlink(t *testing.T) {
	st := store.NewMemStore()
	commit(t, st, 10, []tfile{{path: "x", data: []byte("old")}}, nil)
	commit(t, st, 20, []tfile{{path: "x", data: []byte("new")}}, nil)
	real := t.TempDir()
	dir := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(real, dir); err != nil {
		t.Fatal(err)
	}
	res, err := Restore(context.Background(), Options{Store: st, Prefix: testPrefix, Dir: dir, Step: 10})
	if err != nil {
		t.Fatal(err)
	}
	if res.Step != 10 {
		t.Errorf("step %d", res.Step)
	}
	assertFile(t, filepath.Join(real, "x"), []byte("old"))
}

func TestNoCheckpoint(t *testing.T) {
	st := store.NewMemStore()
	dir := filepath.Join(t.TempDir(), "target")
	_, err := Restore(context.Background(), Options{Store: st, Prefix: testPrefix, Dir: dir, Step: LatestStep})
	if !errors.Is(err, remote.ErrNoCheckpoint) {
		t.Fatalf("latest of empty prefix: %v, want ErrNoCheckpoint", err)
	}
	commit(t, st, 5, []tfile{{path: "x", data: []byte("x")}}, nil)
	_, err = Restore(context.Background(), Options{Store: st, Prefix: testPrefix, Dir: dir, Step: 6})
	if !errors.Is(err, remote.ErrNoCheckpoint) || !strings.Contains(err.Error(), "step 6") {
		t.Fatalf("missing step: %v, want ErrNoCheckpoint naming step 6", err)
	}
	assertAbsent(t, dir)
}

func TestResume(t *testing.T) {
	st := &hookStore{Store: store.NewMemStore()}
	good := randBytes(3*mib, 1)
	wrong := randBytes(2*mib, 2)
	short := randBytes(mib, 3)
	viaLink := randBytes(1000, 4)
	commit(t, st, 7, []tfile{
		{path: "good.pt", data: good},
		{path: "wrong.pt", data: wrong},
		{path: "short.pt", data: short},
		{path: "link.pt", data: viaLink},
	}, nil)
	dir := t.TempDir()
	outside := filepath.Join(t.TempDir(), "outside")
	os.WriteFile(filepath.Join(dir, "good.pt"), good, 0o644)
	os.WriteFile(filepath.Join(dir, "wrong.pt"), randBytes(2*mib, 99), 0o644) // same size, other bytes
	os.WriteFile(filepath.Join(dir, "short.pt"), short[:100], 0o644)
	os.WriteFile(outside, viaLink, 0o644)
	os.Symlink(outside, filepath.Join(dir, "link.pt")) // right bytes, but a link
	os.WriteFile(filepath.Join(dir, "user.txt"), []byte("mine"), 0o600)

	res, err := Restore(context.Background(), Options{Store: st, Prefix: testPrefix, Dir: dir, Step: LatestStep, ChunkSize: mib})
	if err != nil {
		t.Fatal(err)
	}
	if res.Kept != 1 || res.Downloaded != 3 || res.BytesDownloaded != int64(len(wrong)+len(short)+len(viaLink)) {
		t.Errorf("result %+v", res)
	}
	if g := st.gets(manifest.DataKey(testPrefix, 7, "a1", "good.pt")); len(g) != 0 {
		t.Errorf("a correct file was downloaded again: %+v", g)
	}
	assertFile(t, filepath.Join(dir, "good.pt"), good)
	assertFile(t, filepath.Join(dir, "wrong.pt"), wrong)
	assertFile(t, filepath.Join(dir, "short.pt"), short)
	assertFile(t, filepath.Join(dir, "link.pt"), viaLink) // now a regular file
	assertFile(t, outside, viaLink)                       // the link's target untouched
	assertFile(t, filepath.Join(dir, "user.txt"), []byte("mine"))

	// A second run finds everything in place and fetches nothing.
	before := st.dataGets()
	res, err = Restore(context.Background(), Options{Store: st, Prefix: testPrefix, Dir: dir, Step: LatestStep, ChunkSize: mib})
	if err != nil {
		t.Fatal(err)
	}
	if res.Kept != 4 || res.Downloaded != 0 || st.dataGets() != before {
		t.Errorf("second run: %+v, %d data GETs", res, st.dataGets()-before)
	}
}

func TestRanks(t *testing.T) {
	st := store.NewMemStore()
	commit(t, st, 3, []tfile{
		{path: "rank0.pt", data: []byte("zero"), rank: rank(0)},
		{path: "rank1.pt", data: []byte("one"), rank: rank(1)},
		{path: "rank2.pt", data: []byte("two"), rank: rank(2)},
		{path: "shared.json", data: []byte("{}")},
	}, []manifest.Symlink{{Path: "latest", Target: "rank0.pt"}})
	dir := t.TempDir()
	res, err := Restore(context.Background(), Options{Store: st, Prefix: testPrefix, Dir: dir, Step: 3,
		Ranks: func(r *int) bool { return r != nil && *r == 1 }})
	if err != nil {
		t.Fatal(err)
	}
	got := tree(t, dir)
	want := []string{"latest@rank0.pt", "rank1.pt", "shared.json"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("restored %v, want %v", got, want)
	}
	if res.Files != 2 || res.Bytes != 5 {
		t.Errorf("result %+v", res)
	}
	assertFile(t, filepath.Join(dir, "rank1.pt"), []byte("one"))
}

// blockingBody delivers some bytes, then blocks until ctx ends.
type blockingBody struct {
	ctx     context.Context
	first   []byte
	started chan struct{}
	once    *sync.Once
}

func (b *blockingBody) Read(p []byte) (int, error) {
	if len(b.first) > 0 {
		n := copy(p, b.first)
		b.first = b.first[n:]
		return n, nil
	}
	b.once.Do(func() { close(b.started) })
	<-b.ctx.Done()
	return 0, b.ctx.Err()
}

func TestCancel(t *testing.T) {
	mem := store.NewMemStore()
	big := randBytes(4*mib, 1)
	commit(t, mem, 1, []tfile{
		{path: "small", data: []byte("small")},
		{path: "sub/big.pt", data: big},
		{path: "keep.pt", data: []byte("new")},
	}, []manifest.Symlink{{Path: "latest", Target: "sub/big.pt"}})
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "keep.pt"), []byte("old"), 0o644)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	started := make(chan struct{})
	var once sync.Once
	st := &hookStore{Store: mem, body: func(key string, off int64, n int, rc io.ReadCloser) io.ReadCloser {
		data, _ := io.ReadAll(rc)
		return readCloser{&blockingBody{ctx: ctx, first: data[:len(data)/2], started: started, once: &once}, rc}
	}}
	errc := make(chan error, 1)
	go func() {
		_, err := Restore(ctx, Options{Store: st, Prefix: testPrefix, Dir: dir, Step: 1, ChunkSize: mib, Concurrency: 8})
		errc <- err
	}()
	<-started
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("restore did not stop after cancel")
	}
	assertNoTemps(t, dir)
	assertFile(t, filepath.Join(dir, "keep.pt"), []byte("old"))
	if got := tree(t, dir); fmt.Sprint(got) != "[keep.pt]" {
		t.Errorf("after cancel the target holds %v, want only keep.pt", got)
	}
}

func TestManySmallFiles(t *testing.T) {
	if testing.Short() {
		t.Skip("10,000 files")
	}
	st := store.NewMemStore()
	var files []tfile
	for i := range 10000 {
		files = append(files, tfile{path: fmt.Sprintf("shard%02d/f%05d.bin", i%20, i), data: randBytes(100+i%50, uint64(i))})
	}
	commit(t, st, 1, files, nil)
	dir := t.TempDir()
	start := time.Now()
	res, err := Restore(context.Background(), Options{Store: st, Prefix: testPrefix, Dir: dir, Step: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("10,000 files restored in %v", time.Since(start))
	if res.Downloaded != 10000 {
		t.Errorf("result %+v", res)
	}
	for _, i := range []int{0, 1, 4999, 9999} {
		assertFile(t, filepath.Join(dir, files[i].path), files[i].data)
	}
	if n := len(tree(t, dir)); n != 10020 {
		t.Errorf("%d entries in the target, want 10,000 files in 20 directories", n)
	}
}

// TestPlanOnly: a planned restore reports the selected files and bytes, and
// writes nothing and fetches no object.
func TestPlanOnly(t *testing.T) {
	mem := store.NewMemStore()
	commit(t, mem, 10, []tfile{
		{path: "model-rank0.pt", data: []byte("zero"), rank: rank(0)},
		{path: "model-rank1.pt", data: []byte("one!!"), rank: rank(1)},
		{path: "config.json", data: []byte("{}")},
	}, nil)
	st := &hookStore{Store: mem}
	dir := filepath.Join(t.TempDir(), "target")
	res, err := Restore(context.Background(), Options{Store: st, Prefix: testPrefix, Dir: dir, Step: LatestStep, PlanOnly: true,
		Ranks: func(r *int) bool { return *r == 1 }})
	if err != nil {
		t.Fatal(err)
	}
	if res.Step != 10 || res.Files != 2 || res.Bytes != 7 {
		t.Fatalf("plan: step %d, %d files, %d bytes; want step 10, 2 files, 7 bytes", res.Step, res.Files, res.Bytes)
	}
	if n := st.dataGets(); n != 0 {
		t.Errorf("a planned restore made %d data GETs", n)
	}
	assertAbsent(t, dir)
}
