package copier

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zeebo/blake3"

	"github.com/ferrylabs/ferry/internal/remote"
	"github.com/ferrylabs/ferry/internal/steptest"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/manifest"
)

// srcFile is a file of a hand-made source step.
type srcFile struct {
	path string
	body []byte
}

func randomFile(path string, size int) srcFile {
	b := make([]byte, size)
	_, _ = rand.Read(b)
	return srcFile{path, b}
}

// packedStep is a step committed at the source by commitPacked.
type packedStep struct {
	m       *manifest.Manifest
	pack    []byte // the pack's bytes
	packKey string
	bodies  map[string][]byte // by path
}

// commitPacked commits step n under "run" at the source as a packing
// uploader would: the files of packed in one pack, each followed by gap
// bytes no file covers, and the files of own as objects of their own.
func commitPacked(t *testing.T, st store.Store, n int64, attempt string, packed, own []srcFile, gap int) packedStep {
	t.Helper()
	s := packedStep{packKey: manifest.PackKey("run", n, attempt, "0001"), bodies: map[string][]byte{}}
	m := &manifest.Manifest{Format: manifest.FormatVersion, Step: n, Created: time.Now().UTC()}
	in := make([]steptest.File, len(packed))
	for i, f := range packed {
		in[i] = steptest.File{Path: f.path, Data: f.body}
	}
	m.Files, s.pack = steptest.Pack(s.packKey, gap, in...)
	steptest.Put(t, st, s.packKey, s.pack)
	for _, f := range own {
		key := manifest.DataKey("run", n, attempt, f.path)
		steptest.Put(t, st, key, f.body)
		m.Files = append(m.Files, steptest.Entry(key, steptest.File{Path: f.path, Data: f.body}))
	}
	for _, f := range append(packed, own...) {
		s.bodies[f.path] = f.body
	}
	if _, committed, err := remote.Commit(t.Context(), st, "run", m); err != nil || !committed {
		t.Fatalf("commit packed step %d at the source: %v, %v", n, committed, err)
	}
	s.m = m
	return s
}

func put(t *testing.T, st store.Store, key string, body []byte) {
	t.Helper()
	if _, err := st.Put(t.Context(), key, bytes.NewReader(body), int64(len(body)), store.PutOptions{CRC32C: store.CRC32C(body)}); err != nil {
		t.Fatal(err)
	}
}

func hash(b []byte) string {
	sum := blake3.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// destKey is where the copy puts a source object.
func destKey(key string) string { return "moved/run/data/" + strings.TrimPrefix(key, "run/data/") }

// samePacked checks the destination's step n file by file against s: each
// entry's bytes, read from the destination object it names at its offset,
// and its pack fields, mapped as the copier maps keys unless deduplicated
// (then the entry of dedup, by path).
func samePacked(t *testing.T, st store.Store, n int64, s packedStep, dedup map[string]manifest.File) *manifest.Manifest {
	t.Helper()
	dst, err := remote.Get(t.Context(), st, "moved/run", n)
	if err != nil {
		t.Fatalf("destination step %d: %v", n, err)
	}
	if dst.Format != manifest.PackedFormat || !manifest.SameContent(s.m, dst) {
		t.Fatalf("destination step %d: format %s, same content %v", n, dst.Format, manifest.SameContent(s.m, dst))
	}
	srcFiles := map[string]manifest.File{}
	for _, f := range s.m.Files {
		srcFiles[f.Path] = f
	}
	for _, f := range dst.Files {
		want := srcFiles[f.Path]
		want.Key = destKey(want.Key)
		if d, ok := dedup[f.Path]; ok {
			want = d
		}
		if f.Key != want.Key || f.PackSize != want.PackSize || f.Offset != want.Offset || f.Packed() && f.PartSize != 0 {
			t.Fatalf("destination entry %+v, want key %s, pack size %d, offset %d", f, want.Key, want.PackSize, want.Offset)
		}
		obj := readAll(t, st, f.Key)
		if int64(len(obj)) != f.ObjectSize() || !bytes.Equal(obj[f.Offset:f.Offset+f.Size], s.bodies[f.Path]) {
			t.Fatalf("%s: the destination's bytes differ from the source's", f.Path)
		}
	}
	return dst
}

var (
	small = []srcFile{randomFile("a.json", 300), randomFile("b.bin", 5000), randomFile("c.txt", 1), randomFile("empty", 0)}
	model = randomFile("model.pt", 9<<20+3) // two parts at the destination
)

func TestCopyPackedStep(t *testing.T) {
	s := twoServers(t)
	src := commitPacked(t, s.from, 10, "att1", small, []srcFile{model}, 7)
	res, err := CopyStep(t.Context(), s.options(), 10)
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(len(src.pack) + len(model.body)); res.Sent != 2 || res.BytesSent != want || res.Files != len(small)+1 {
		t.Fatalf("result %+v: want the pack and model.pt sent, %d bytes", res, want)
	}
	if got := readAll(t, s.to, destKey(src.packKey)); !bytes.Equal(got, src.pack) {
		t.Fatal("the destination's pack differs from the source's")
	}
	samePacked(t, s.to, 10, src, nil)
	dir := t.TempDir()
	for path, body := range src.bodies {
		if err := os.WriteFile(filepath.Join(dir, path), body, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	restoreEqual(t, s.to, "moved/run", 10, dir)
}

// A copy stopped after its objects reached the destination, before its
// commit, sends no object again: the pack is found complete by the LIST.
func TestCopyResumesAPackedStep(t *testing.T) {
	s := twoServers(t)
	src := commitPacked(t, s.from, 10, "att1", small, []srcFile{model}, 0)
	o := s.options()
	o.To = &store.Faulty{Inner: s.to, Before: func(op, key string) error {
		if op == "Put" && strings.Contains(key, "/manifests/") {
			return errors.New("stopped before the commit")
		}
		return nil
	}}
	if _, err := CopyStep(t.Context(), o, 10); err == nil {
		t.Fatal("the stopped copy committed")
	}
	var dataGets atomic.Int32
	to := &store.Faulty{Inner: s.to}
	o.To, o.From = to, &store.Faulty{Inner: s.from, Before: func(op, key string) error {
		if op == "Get" && strings.Contains(key, "/data/") {
			dataGets.Add(1)
		}
		return nil
	}}
	res, err := CopyStep(t.Context(), o, 10)
	if err != nil {
		t.Fatal(err)
	}
	if res.Sent != 0 || res.Present != 2 || res.BytesSent != 0 || to.Count("Put") != 1 || dataGets.Load() != 0 {
		t.Fatalf("resumed copy %+v, %d PUTs, %d GETs of source objects: want both objects present, only the manifest written",
			res, to.Count("Put"), dataGets.Load())
	}
	samePacked(t, s.to, 10, src, nil)
}

// A pack whose bytes differ from what the manifest says of its files is
// not copied and the step is not committed; bytes no file covers are not
// checked.
func TestCopyRefusesCorruptPack(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(s packedStep) []byte
		file   string // named in the error; "" when the copy succeeds
	}{
		{"a file's bytes changed", func(s packedStep) []byte { s.pack[s.m.Files[1].Offset+10] ^= 1; return s.pack }, "b.bin"},
		{"a one-byte file changed", func(s packedStep) []byte { s.pack[s.m.Files[2].Offset] ^= 1; return s.pack }, "c.txt"},
		{"truncated", func(s packedStep) []byte { return s.pack[:len(s.pack)-1] }, "pack of 4 files"},
		{"longer", func(s packedStep) []byte { return append(s.pack, 0) }, "it is longer"},
		{"a gap byte changed", func(s packedStep) []byte { s.pack[300] ^= 1; return s.pack }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := twoServers(t)
			src := commitPacked(t, s.from, 10, "att1", small, []srcFile{model}, 3)
			src.pack = bytes.Clone(src.pack)
			put(t, s.from, src.packKey, tc.damage(src))
			_, err := CopyStep(t.Context(), s.options(), 10)
			if tc.file == "" {
				if err != nil {
					t.Fatalf("copy with bytes no file covers changed: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrSourceCorrupt) || !strings.Contains(err.Error(), src.packKey) || !strings.Contains(err.Error(), tc.file) {
				t.Fatalf("copy of a corrupt pack: %v, want ErrSourceCorrupt naming %s and %q", err, src.packKey, tc.file)
			}
			if _, err := remote.Get(t.Context(), s.to, "moved/run", 10); !errors.Is(err, remote.ErrNoCheckpoint) {
				t.Fatalf("a manifest was committed at the destination: %v", err)
			}
			if _, err := s.to.Head(t.Context(), destKey(src.packKey)); !errors.Is(err, store.ErrNotExist) {
				t.Fatalf("the corrupt pack reached the destination: %v", err)
			}
		})
	}
}

// Packed files the destination's previous step holds refer to its
// entries; a pack with another file is copied whole; a pack all of whose
// files are deduplicated is not copied.
func TestCopyDeduplicatesPackedFiles(t *testing.T) {
	s := twoServers(t)
	step10 := commitPacked(t, s.from, 10, "att1", small, []srcFile{model}, 0)
	if _, err := CopyStep(t.Context(), s.options(), 10); err != nil {
		t.Fatal(err)
	}
	dst10 := samePacked(t, s.to, 10, step10, nil)
	dedup := map[string]manifest.File{}
	for _, f := range dst10.Files {
		dedup[f.Path] = f
	}
	delete(dedup, "c.txt")

	step20 := commitPacked(t, s.from, 20, "att2", []srcFile{small[0], randomFile("new.json", 77), small[1]}, []srcFile{model}, 0)
	res, err := CopyStep(t.Context(), s.options(), 20)
	if err != nil {
		t.Fatal(err)
	}
	if res.Sent != 1 || res.BytesSent != int64(len(step20.pack)) || res.Deduplicated != 3 {
		t.Fatalf("step 20: %+v, want its pack sent whole and a.json, b.bin, model.pt deduplicated", res)
	}
	samePacked(t, s.to, 20, step20, dedup)

	step30 := commitPacked(t, s.from, 30, "att3", small[:2], []srcFile{model}, 5)
	res, err = CopyStep(t.Context(), s.options(), 30)
	if err != nil {
		t.Fatal(err)
	}
	if res.Sent != 0 || res.Deduplicated != 3 {
		t.Fatalf("step 30: %+v, want every file deduplicated and nothing sent", res)
	}
	samePacked(t, s.to, 30, step30, dedup)
	if _, err := s.to.Head(t.Context(), destKey(step30.packKey)); !errors.Is(err, store.ErrNotExist) {
		t.Fatalf("a pack all of whose files are deduplicated was copied: %v", err)
	}
}

// A pack larger than the copier buffers is refused before anything is
// read or written.
func TestCopyRefusesAnOversizedPack(t *testing.T) {
	s := twoServers(t)
	body := small[0].body
	m := &manifest.Manifest{Format: manifest.FormatVersion, Step: 10, Created: time.Now().UTC(), Files: []manifest.File{{
		Path: "a.json", Size: int64(len(body)), BLAKE3: hash(body), Key: manifest.PackKey("run", 10, "att1", "0001"), PackSize: maxPack + 1}}}
	if _, _, err := remote.Commit(t.Context(), s.from, "run", m); err != nil {
		t.Fatal(err)
	}
	to := &store.Faulty{Inner: s.to}
	o := s.options()
	o.To = to
	_, err := CopyStep(t.Context(), o, 10)
	if err == nil || !strings.Contains(err.Error(), "copy step 10") || !strings.Contains(err.Error(), "packs of at most") {
		t.Fatalf("copy of a %d-byte pack: %v, want it refused", maxPack+1, err)
	}
	if to.Count("Put")+to.Count("CreateMultipart") != 0 {
		t.Fatal("the copy of an oversized pack wrote at the destination")
	}
}
