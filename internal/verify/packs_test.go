package verify

import (
	"context"
	"encoding/hex"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zeebo/blake3"

	"github.com/ferrylabs/ferry/internal/remote"
	"github.com/ferrylabs/ferry/internal/s3test"
	"github.com/ferrylabs/ferry/internal/steptest"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/manifest"
)

// member is a file to pack: its path and bytes.
type member = steptest.File

// content is n bytes that differ from another seed's.
func content(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed ^ byte(i*13+i/251)
	}
	return b
}

func b3(data []byte) string {
	sum := blake3.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// putPack writes members, concatenated, as pack name of a push attempt of
// step, as a format 3 writer does (the uploader does not pack yet), and
// returns the files that name it and the pack's bytes.
func putPack(t *testing.T, st store.Store, step int64, attempt, name string, members ...member) ([]manifest.File, []byte) {
	t.Helper()
	key := manifest.PackKey("run", step, attempt, name)
	files, pack := steptest.Pack(key, 0, members...)
	steptest.Put(t, st, key, pack)
	return files, pack
}

// putFile writes data as an object of its own in the attempt's folder.
func putFile(t *testing.T, st store.Store, step int64, attempt, path string, data []byte) manifest.File {
	t.Helper()
	key := manifest.DataKey("run", step, attempt, path)
	put(t, st, key, data)
	return manifest.File{Path: path, Size: int64(len(data)), BLAKE3: b3(data), Key: key}
}

// commitFiles commits step with files (a format 3 manifest when any is
// packed).
func commitFiles(t *testing.T, st store.Store, step int64, files []manifest.File) *manifest.Manifest {
	t.Helper()
	m := &manifest.Manifest{Format: manifest.FormatVersion, Step: step, Created: time.Now().UTC(), Files: files}
	if _, ok, err := remote.Commit(t.Context(), st, "run", m); err != nil || !ok {
		t.Fatalf("commit step %d: committed %v, %v", step, ok, err)
	}
	return m
}

// recording records the LISTs, HEADs and ranged GETs verify makes.
type recording struct {
	store.Store
	mu    sync.Mutex
	lists []string
	heads []string
	gets  [][3]int64 // offset, length, and 1 when the key is the pack's
	pack  string
}

func (r *recording) List(ctx context.Context, prefix, after string, max int, fn func(store.ObjectInfo) error) error {
	r.mu.Lock()
	r.lists = append(r.lists, prefix)
	r.mu.Unlock()
	return r.Store.List(ctx, prefix, after, max, fn)
}

func (r *recording) Head(ctx context.Context, key string) (store.ObjectInfo, error) {
	r.mu.Lock()
	r.heads = append(r.heads, key)
	r.mu.Unlock()
	return r.Store.Head(ctx, key)
}

func (r *recording) Get(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	r.mu.Lock()
	if key == r.pack {
		r.gets = append(r.gets, [3]int64{off, n, 1})
	}
	r.mu.Unlock()
	return r.Store.Get(ctx, key, off, n)
}

// packedStep commits step 10: a.json, b.json and c.json packed in one
// object, big.bin an object of its own beside them.
func packedStep(t *testing.T, st store.Store) (*manifest.Manifest, []byte) {
	t.Helper()
	files, pack := putPack(t, st, 10, "att", "p1",
		member{Path: "a.json", Data: content(1000, 1)}, member{Path: "b.json", Data: content(2000, 2)}, member{Path: "c.json", Data: content(3000, 3)})
	files = append(files, putFile(t, st, 10, "att", "big.bin", content(6000, 4)))
	return commitFiles(t, st, 10, files), pack
}

// A healthy packed step passes, its pack checked with one request
// whatever the number of files in it; with --read-data each packed file
// is read from its pack with a GET of exactly its own bytes.
func TestVerifyPackedHealthy(t *testing.T) {
	srv := s3test.Shared(t)
	st := &recording{Store: srv.Store(t, srv.NewBucket(t))}
	m, _ := packedStep(t, st)
	st.pack = m.Files[0].Key
	for _, share := range []float64{0, 1} {
		st.lists, st.heads, st.gets = nil, nil, nil
		reps, err := Verify(t.Context(), Options{Store: st, Prefix: "run", Steps: []int64{10}, ReadShare: share})
		if err != nil || len(reps) != 1 || !reps[0].OK() {
			t.Fatalf("share %v: Verify: %+v, %v", share, reps, err)
		}
		rep := reps[0]
		if rep.Files != 4 || rep.Bytes != 12000 {
			t.Errorf("share %v: %d files, %d bytes; want 4, 12000", share, rep.Files, rep.Bytes)
		}
		// The pack is asked once, not once per file; so is big.bin.
		slices.Sort(st.heads)
		want := []string{m.Files[3].Key, st.pack}
		slices.Sort(want)
		if len(st.lists) != 0 || !slices.Equal(st.heads, want) {
			t.Errorf("share %v: LIST %v, HEAD %v; want no LIST, HEAD %v", share, st.lists, st.heads, want)
		}
		if share == 0 {
			if len(st.gets) != 0 || rep.FilesRead != 0 {
				t.Errorf("share 0: %d GETs of the pack, %d files read", len(st.gets), rep.FilesRead)
			}
			continue
		}
		if rep.FilesRead != 4 || rep.BytesRead != 12000 {
			t.Errorf("read %d files, %d bytes; want 4, 12000", rep.FilesRead, rep.BytesRead)
		}
		slices.SortFunc(st.gets, func(a, b [3]int64) int { return int(a[0] - b[0]) })
		if want := [][3]int64{{0, 1000, 1}, {1000, 2000, 1}, {3000, 3000, 1}}; !slices.Equal(st.gets, want) {
			t.Errorf("GETs of the pack (offset, length): %v; want %v", st.gets, want)
		}
	}
}

// Damage to a pack is found: deleted, every file it holds is reported
// missing in one problem naming them and the pack; truncated, the same as
// wrong size; one file's bytes changed in place, only that file fails,
// and only when the data is read.
func TestVerifyPackedDamage(t *testing.T) {
	srv := s3test.Shared(t)
	all := []string{"a.json", "b.json", "c.json"}
	cases := []struct {
		name   string
		damage func(t *testing.T, st store.Store, key string, pack []byte)
		share  float64
		want   Problem // Step, Kind, Path, Paths; Detail when set
		read   int     // files read
	}{
		{"pack deleted", func(t *testing.T, st store.Store, key string, _ []byte) {
			if err := st.Delete(t.Context(), key); err != nil {
				t.Fatal(err)
			}
		}, 1, Problem{Kind: Missing, Paths: all, Detail: "no object at %KEY (a pack holding 3 of the step's files)"}, 1},
		{"pack truncated", func(t *testing.T, st store.Store, key string, pack []byte) {
			put(t, st, key, pack[:len(pack)-1])
		}, 1, Problem{Kind: WrongSize, Paths: all, Detail: "object has 5999 bytes, the manifest says 6000 (a pack holding 3 of the step's files)"}, 1},
		{"b changed, not read", func(t *testing.T, st store.Store, key string, pack []byte) {
			put(t, st, key, changeB(pack))
		}, 0, Problem{}, 0},
		{"b changed, read", func(t *testing.T, st store.Store, key string, pack []byte) {
			put(t, st, key, changeB(pack))
		}, 1, Problem{Kind: WrongHash, Path: "b.json"}, 4},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := srv.Store(t, srv.NewBucket(t))
			m, pack := packedStep(t, st)
			key := m.Files[0].Key
			tc.damage(t, st, key, pack)
			reps, err := Verify(t.Context(), Options{Store: st, Prefix: "run", Steps: []int64{10}, ReadShare: tc.share})
			if err != nil || len(reps) != 1 {
				t.Fatalf("Verify: %+v, %v", reps, err)
			}
			rep := reps[0]
			if rep.FilesRead != tc.read {
				t.Errorf("%d files read, want %d", rep.FilesRead, tc.read)
			}
			if tc.want.Kind == "" {
				if !rep.OK() {
					t.Fatalf("problems %v; want none", rep.Problems)
				}
				return
			}
			checkProblems(t, rep.Problems, tc.want, key)
		})
	}
}

// changeB returns pack with b.json's first and last bytes changed: its
// neighbours' bytes are the same.
func changeB(pack []byte) []byte {
	p := slices.Clone(pack)
	p[1000] ^= 0xff
	p[2999] ^= 0xff
	return p
}

// checkProblems checks that got is exactly want, for the step 10 pack key.
func checkProblems(t *testing.T, got []Problem, want Problem, key string) {
	t.Helper()
	want.Step, want.Key = 10, key
	want.Detail = strings.ReplaceAll(want.Detail, "%KEY", key)
	if len(got) != 1 {
		t.Fatalf("problems %v; want one: %v", got, want)
	}
	g := got[0]
	if want.Detail == "" {
		want.Detail = g.Detail
	}
	if g.Step != want.Step || g.Kind != want.Kind || g.Path != want.Path || !slices.Equal(g.Paths, want.Paths) ||
		g.Key != want.Key || g.Detail != want.Detail {
		t.Fatalf("problem %+v;\nwant %+v", g, want)
	}
	line := g.String()
	for _, p := range append(slices.Clone(want.Paths), want.Path) {
		if !strings.Contains(line, p) {
			t.Errorf("%q does not name %s", line, p)
		}
	}
	if want.Kind == WrongHash && !strings.Contains(g.Detail, "bytes 1000-3000 of the pack") {
		t.Errorf("wrong hash detail %q does not say where in the pack", g.Detail)
	}
}

// A packed file of several ranges is read range by range from its offset
// in the pack (its ranges' subtrees are the file's, not the pack's), and a
// byte changed in its middle range is found.
func TestVerifyPackedMultiRange(t *testing.T) {
	srv := s3test.Shared(t)
	st := &recording{Store: srv.Store(t, srv.NewBucket(t))}
	big := 2*DefaultRangeSize + 777
	files, pack := putPack(t, st, 7, "att", "p1",
		member{Path: "x.json", Data: content(1001, 5)}, member{Path: "big.bin", Data: content(big, 6)}, member{Path: "y.json", Data: content(500, 7)})
	commitFiles(t, st, 7, files)
	st.pack = files[0].Key
	opts := Options{Store: st, Prefix: "run", Steps: []int64{7}, ReadShare: 1}
	reps, err := Verify(t.Context(), opts)
	if err != nil || !reps[0].OK() || reps[0].FilesRead != 3 {
		t.Fatalf("healthy pack with a 3-range file: %+v, %v", reps, err)
	}
	slices.SortFunc(st.gets, func(a, b [3]int64) int { return int(a[0] - b[0]) })
	want := [][3]int64{{0, 1001, 1}, {1001, DefaultRangeSize, 1}, {1001 + DefaultRangeSize, DefaultRangeSize, 1},
		{1001 + 2*DefaultRangeSize, 777, 1}, {1001 + int64(big), 500, 1}}
	if !slices.Equal(st.gets, want) {
		t.Errorf("GETs of the pack (offset, length): %v; want %v", st.gets, want)
	}
	pack[1001+DefaultRangeSize+9] ^= 1
	put(t, st, st.pack, pack)
	reps, err = Verify(t.Context(), opts)
	if err != nil || len(reps[0].Problems) != 1 || reps[0].Problems[0].Kind != WrongHash || reps[0].Problems[0].Path != "big.bin" {
		t.Fatalf("one byte changed in big.bin's middle range: %+v, %v; want one wrong hash for big.bin", reps, err)
	}
}

// The packs of a push attempt are one folder of their own: several packs
// are found with one LIST of <step>/<attempt>.pack-, which lists neither
// the attempt's other files nor another attempt's packs.
func TestVerifyPacksListed(t *testing.T) {
	srv := s3test.Shared(t)
	st := &recording{Store: srv.Store(t, srv.NewBucket(t))}
	var files []manifest.File
	for _, name := range []string{"p1", "p2", "p3"} {
		f, _ := putPack(t, st, 5, "att", name, member{Path: name + "-a", Data: content(100, 1)}, member{Path: name + "-b", Data: content(200, 2)})
		files = append(files, f...)
	}
	files = append(files, putFile(t, st, 5, "att", "big.bin", content(3000, 3)))
	commitFiles(t, st, 5, files)
	if err := st.Delete(t.Context(), files[2].Key); err != nil { // p2
		t.Fatal(err)
	}
	reps, err := Verify(t.Context(), Options{Store: st, Prefix: "run", Steps: []int64{5}})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"run/data/000000000005/att.pack-"}; !slices.Equal(st.lists, want) || len(st.heads) != 1 {
		t.Errorf("LIST %v, %d HEAD; want LIST %v and a HEAD of big.bin", st.lists, len(st.heads), want)
	}
	p := reps[0].Problems
	if len(p) != 1 || p[0].Kind != Missing || p[0].Key != files[2].Key || !slices.Equal(p[0].Paths, []string{"p2-a", "p2-b"}) {
		t.Fatalf("problems %+v; want p2 missing with p2-a and p2-b", p)
	}
}
