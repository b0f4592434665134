package copier

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ferrylabs/ferry/internal/remote"
	"github.com/ferrylabs/ferry/internal/s3test"
	"github.com/ferrylabs/ferry/internal/steptest"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/manifest"
	"github.com/ferrylabs/ferry/restore"
	"github.com/ferrylabs/ferry/uploader"
)

func TestMain(m *testing.M) { s3test.Main(m) }

// stores are a source and a destination on two versitygw servers.
type stores struct {
	src, dst *s3test.Server
	from, to store.Store
}

func twoServers(t *testing.T) stores {
	t.Helper()
	src, dst := s3test.Shared(t), s3test.Start(t).AsR2(t)
	return stores{src: src, dst: dst, from: src.Store(t, src.NewBucket(t)), to: dst.Store(t, dst.NewBucket(t))}
}

func (s stores) options() Options {
	return Options{From: s.from, To: s.to, FromPrefix: "run", ToPrefix: "moved/run", PartSize: 8 << 20, Concurrency: 8}
}

// writeTree writes files of the given sizes (random bytes) under dir.
func writeTree(t *testing.T, dir string, files map[string]int) {
	t.Helper()
	for name, size := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		b := make([]byte, size)
		_, _ = rand.Read(b)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// push commits step n of dir at the source.
func push(t *testing.T, st store.Store, dir string, n int64) *manifest.Manifest {
	t.Helper()
	return steptest.Push(t, st, "run", dir, n, uploader.PushOptions{Upload: uploader.Options{PartSize: 5 << 20}})
}

// restoreEqual restores step n from the destination and compares every
// file with dir.
func restoreEqual(t *testing.T, st store.Store, prefix string, n int64, dir string) {
	t.Helper()
	out := t.TempDir()
	if _, err := restore.Restore(t.Context(), restore.Options{Store: st, Prefix: prefix, Dir: out, Step: n}); err != nil {
		t.Fatalf("restore step %d from the destination: %v", n, err)
	}
	count := 0
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		want, _ := os.ReadFile(p)
		got, err := os.ReadFile(filepath.Join(out, rel))
		if err != nil {
			return fmt.Errorf("restored %s: %w", rel, err)
		}
		if !bytes.Equal(got, want) {
			return fmt.Errorf("restored %s differs from what was pushed", rel)
		}
		count++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if count == 0 {
		t.Fatal("nothing compared")
	}
}

var tree = map[string]int{
	"model.pt":            21 << 20, // three 8 MiB parts at the destination
	"optim/rank0.pt":      9<<20 + 17,
	"config.json":         311, // packed with empty by the push
	"empty":               0,
	"shards/a.safetensor": 8 << 20, // exactly one part: one PUT
}

// objects are the objects m names, in the order of their first file: the
// copier's order. Each is the first file naming it (ObjectSize its size).
func objects(m *manifest.Manifest) []manifest.File {
	var out []manifest.File
	seen := map[string]bool{}
	for _, f := range m.Files {
		if !seen[f.Key] {
			seen[f.Key] = true
			out = append(out, f)
		}
	}
	return out
}

// objectBytes is the sum of the sizes of objs.
func objectBytes(objs []manifest.File) int64 {
	var n int64
	for _, f := range objs {
		n += f.ObjectSize()
	}
	return n
}

func TestCopyStepRestoresByteForByte(t *testing.T) {
	s := twoServers(t)
	dir := t.TempDir()
	writeTree(t, dir, tree)
	src := push(t, s.from, dir, 100)

	res, err := CopyStep(t.Context(), s.options(), 100)
	if err != nil {
		t.Fatal(err)
	}
	objs := objects(src)
	if len(objs) != len(tree)-1 {
		t.Fatalf("the push wrote %d objects for %d files, want config.json and empty in one pack", len(objs), len(tree))
	}
	if res.Sent != len(objs) || res.BytesSent != objectBytes(objs) || res.AlreadyCommitted || res.Present != 0 {
		t.Fatalf("result %+v: want all %d objects (%d bytes) sent", res, len(objs), objectBytes(objs))
	}
	dst, err := remote.Get(t.Context(), s.to, "moved/run", 100)
	if err != nil {
		t.Fatal(err)
	}
	if !manifest.SameContent(src, dst) {
		t.Fatal("the destination's manifest does not describe the source's files")
	}
	for _, f := range dst.Files {
		if !strings.HasPrefix(f.Key, "moved/run/data/") {
			t.Fatalf("destination manifest names %s outside the destination prefix", f.Key)
		}
		if want := map[bool]int64{true: 8 << 20, false: 0}[f.Size > 8<<20]; f.PartSize != want {
			t.Fatalf("%s: part size %d, want %d", f.Path, f.PartSize, want)
		}
		if f.Packed() != (f.Path == "config.json" || f.Path == "empty") {
			t.Fatalf("%s: packed %v at the destination", f.Path, f.Packed())
		}
	}
	restoreEqual(t, s.to, "moved/run", 100, dir)

	again, err := CopyStep(t.Context(), s.options(), 100)
	if err != nil || !again.AlreadyCommitted || again.Sent != 0 || again.BytesSent != 0 {
		t.Fatalf("second copy: %+v, %v: want already committed, nothing sent", again, err)
	}
}

func TestCopyDeduplicatesAtTheDestination(t *testing.T) {
	s := twoServers(t)
	dir := t.TempDir()
	writeTree(t, dir, tree)
	step100 := push(t, s.from, dir, 100)
	writeTree(t, dir, map[string]int{"model.pt": 21 << 20}) // only the model changes
	step200 := push(t, s.from, dir, 200)

	// Step 200 alone first: its unchanged files refer to step 100's
	// objects at the source, and are copied to the same keys.
	res, err := CopyStep(t.Context(), s.options(), 200)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(objects(step200)); res.Sent != n || res.Deduplicated != 0 {
		t.Fatalf("step 200 first: %+v, want every object (%d) sent", res, n)
	}
	restoreEqual(t, s.to, "moved/run", 200, dir)

	// Step 100 then finds the objects step 200's copy sent.
	res, err = CopyStep(t.Context(), s.options(), 100)
	if err != nil {
		t.Fatal(err)
	}
	if res.Sent != 1 || res.Present != len(objects(step100))-1 {
		t.Fatalf("step 100 after 200: %+v, want only model.pt sent, the rest present", res)
	}

	// A step 300 with one new file deduplicates against step 200.
	writeTree(t, dir, map[string]int{"extra.bin": 4096})
	push(t, s.from, dir, 300)
	res, err = CopyStep(t.Context(), s.options(), 300)
	if err != nil {
		t.Fatal(err)
	}
	if res.Sent != 1 || res.Deduplicated != len(tree) || res.BytesSent != 4096 {
		t.Fatalf("step 300: %+v, want extra.bin (in a pack of its own) sent and %d files deduplicated", res, len(tree))
	}
	restoreEqual(t, s.to, "moved/run", 300, dir)
}

// TestCopyResumesAfterAKill stops a copy after some parts and objects
// have reached the destination, then runs it again: it sends only the
// rest, keeps the parts already there, and commits once. One request at a
// time makes the point of the kill exact: big.pt (5 parts), mid.pt (3
// parts), four single/ files with a PUT each, then one pack of the ten
// tiny/ files (one PUT).
func TestCopyResumesAfterAKill(t *testing.T) {
	for _, tc := range []struct {
		name          string
		op            string
		n             int32 // the kill comes with the nth call of op
		present, kept int   // objects found complete, parts kept
		puts          int   // PUTs of the resumed run, its manifest's included
	}{
		{"during the second file's parts", "UploadPart", 7, 1, 1, 4 + 1 + 1},
		{"during the single files", "Put", 3, 2 + 2, 0, 2 + 1 + 1},
		{"at the pack", "Put", 5, 2 + 4, 0, 1 + 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := twoServers(t)
			dir := t.TempDir()
			files := map[string]int{"big.pt": 40 << 20, "mid.pt": 24 << 20}
			for i := range 4 {
				files[fmt.Sprintf("single/%02d.pt", i)] = uploader.PackFileLimit + i // not packed, one PUT at the destination
			}
			for i := range 10 {
				files[fmt.Sprintf("tiny/%02d.json", i)] = 1000 + i
			}
			writeTree(t, dir, files)
			src := push(t, s.from, dir, 7)
			objs := objects(src)
			if len(objs) != 7 || !objs[6].Packed() {
				t.Fatalf("the push wrote %d objects, the last packed %v: want 7, the tiny files in one pack", len(objs), objs[len(objs)-1].Packed())
			}

			ctx, cancel := context.WithCancel(t.Context())
			var calls atomic.Int32
			killed := &store.Faulty{Inner: s.to, Before: func(op, key string) error {
				if op == tc.op && calls.Add(1) == tc.n {
					cancel() // the process dies before this request leaves
					return context.Canceled
				}
				return nil
			}}
			o := s.options()
			o.To, o.Concurrency = killed, 1
			if _, err := CopyStep(ctx, o, 7); !errors.Is(err, context.Canceled) {
				t.Fatalf("killed copy: %v, want canceled", err)
			}
			if _, err := remote.Get(t.Context(), s.to, "moved/run", 7); !errors.Is(err, remote.ErrNoCheckpoint) {
				t.Fatalf("after the kill the destination has a manifest: %v", err)
			}

			counted := &store.Faulty{Inner: s.to}
			o.To = counted
			res, err := CopyStep(t.Context(), o, 7)
			if err != nil {
				t.Fatal(err)
			}
			kept := tc.kept
			if s.dst.Kind() == s3test.SeaweedFS {
				// Its ListParts gives no part's CRC32C: a part that
				// cannot be verified is sent again (docs/compatibility.md).
				kept = 0
			}
			sentBefore := objectBytes(objs[:tc.present]) + int64(kept)*(8<<20)
			if want := objectBytes(objs) - sentBefore; res.Present != tc.present || res.PartsKept != kept || res.BytesSent != want {
				t.Fatalf("resumed copy %+v: want %d objects present, %d parts kept, %d bytes sent", res, tc.present, kept, want)
			}
			if got := counted.Count("Put"); got != tc.puts {
				t.Fatalf("resumed copy made %d PUTs, want %d: one per object not yet there and one manifest", got, tc.puts)
			}
			restoreEqual(t, s.to, "moved/run", 7, dir)
			ups, err := s.to.ListUploads(t.Context(), "moved/run/")
			if err != nil || len(ups) != 0 {
				t.Fatalf("unfinished uploads left at the destination: %v, %v", ups, err)
			}
			again, err := CopyStep(t.Context(), o, 7)
			if err != nil || !again.AlreadyCommitted || counted.Count("Put") != tc.puts {
				t.Fatalf("a third run: %+v, %v: want the step already committed and nothing written", again, err)
			}
		})
	}
}

func TestCopyRefusesCorruptSource(t *testing.T) {
	for _, tc := range []struct {
		name   string
		file   string
		damage func(b []byte) []byte
	}{
		{"same size other bytes, multipart", "model.pt", func(b []byte) []byte { b[len(b)/2] ^= 1; return b }},
		{"same size other bytes, one PUT", "shards/a.safetensor", func(b []byte) []byte { b[0] ^= 1; return b }},
		{"same size other bytes, packed", "config.json", func(b []byte) []byte { b[0] ^= 1; return b }},
		{"truncated", "optim/rank0.pt", func(b []byte) []byte { return b[:len(b)-1] }},
		{"deleted", "model.pt", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := twoServers(t)
			dir := t.TempDir()
			writeTree(t, dir, tree)
			src := push(t, s.from, dir, 100)
			var key string
			for _, f := range src.Files {
				if f.Path == tc.file {
					key = f.Key
				}
			}
			if tc.damage == nil {
				if err := s.from.Delete(t.Context(), key); err != nil {
					t.Fatal(err)
				}
			} else {
				body := tc.damage(readAll(t, s.from, key))
				if _, err := s.from.Put(t.Context(), key, bytes.NewReader(body), int64(len(body)), store.PutOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			_, err := CopyStep(t.Context(), s.options(), 100)
			if !errors.Is(err, ErrSourceCorrupt) || !strings.Contains(err.Error(), key) {
				t.Fatalf("copy of a corrupt source: %v, want ErrSourceCorrupt naming %s", err, key)
			}
			if _, err := remote.Get(t.Context(), s.to, "moved/run", 100); !errors.Is(err, remote.ErrNoCheckpoint) {
				t.Fatalf("a manifest was committed at the destination: %v", err)
			}
			dstKey := "moved/run/data/" + strings.TrimPrefix(key, "run/data/")
			if _, err := s.to.Head(t.Context(), dstKey); !errors.Is(err, store.ErrNotExist) {
				t.Fatalf("the corrupt object reached the destination: %v", err)
			}
			ups, _ := s.to.ListUploads(t.Context(), "moved/run/")
			for _, u := range ups {
				if u.Key == dstKey {
					t.Fatalf("the corrupt object's upload was left open")
				}
			}
		})
	}
}

func TestCopyConflict(t *testing.T) {
	s := twoServers(t)
	dir, other := t.TempDir(), t.TempDir()
	writeTree(t, dir, tree)
	writeTree(t, other, map[string]int{"model.pt": 100})
	push(t, s.from, dir, 100)
	_, err := uploader.Destination{Store: s.to, Location: "s3://b/moved/run", Prefix: "moved/run"}.Push(t.Context(),
		steptest.Gather(t, other, 100), uploader.PushOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := CopyStep(t.Context(), s.options(), 100); !errors.Is(err, ErrConflict) {
		t.Fatalf("copy onto a different step: %v, want ErrConflict", err)
	}
}

func readAll(t *testing.T, st store.Store, key string) []byte {
	t.Helper()
	rc, err := st.Get(t.Context(), key, 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A step the agent repaired at the source after it was copied (a later
// revision) is published at the destination as its next revision; a
// destination revision that is not older is a conflict.
func TestCopyPublishesALaterRevision(t *testing.T) {
	s := twoServers(t)
	dir := t.TempDir()
	writeTree(t, dir, tree)
	push(t, s.from, dir, 100)
	if _, err := CopyStep(t.Context(), s.options(), 100); err != nil {
		t.Fatal(err)
	}
	writeTree(t, dir, map[string]int{"late-rank.pt": 5000})
	_, err := uploader.Destination{Store: s.from, Location: "s3://b/run", Prefix: "run"}.Push(t.Context(), steptest.Gather(t, dir, 100),
		uploader.PushOptions{Upload: uploader.Options{PartSize: 5 << 20}, Revise: true})
	if err != nil {
		t.Fatal(err)
	}
	res, err := CopyStep(t.Context(), s.options(), 100)
	if err != nil {
		t.Fatal(err)
	}
	if res.Sent != 1 || res.Deduplicated != len(tree) || res.AlreadyCommitted {
		t.Fatalf("copy of revision 1: %+v, want only the new file sent", res)
	}
	dst, err := remote.Get(t.Context(), s.to, "moved/run", 100)
	if err != nil || dst.Revision != 1 || len(dst.Files) != len(tree)+1 {
		t.Fatalf("destination after the revision: %v files, revision %v, %v", len(dst.Files), dst.Revision, err)
	}
	restoreEqual(t, s.to, "moved/run", 100, dir)

	// The destination moves on on its own: its revision 2 is not the
	// source's revision 1.
	writeTree(t, dir, map[string]int{"late-rank.pt": 6000})
	_, err = uploader.Destination{Store: s.to, Location: "s3://b/moved/run", Prefix: "moved/run"}.Push(t.Context(), steptest.Gather(t, dir, 100),
		uploader.PushOptions{Upload: uploader.Options{PartSize: 5 << 20}, Revise: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := CopyStep(t.Context(), s.options(), 100); !errors.Is(err, ErrConflict) {
		t.Fatalf("copy onto a newer destination revision: %v, want ErrConflict", err)
	}
}

// A sharded manifest (format 2) is read whole at the source and committed
// sharded again at the destination.
func TestCopyShardedStep(t *testing.T) {
	defer manifest.SetShardThresholds(1, 2)()
	s := twoServers(t)
	dir := t.TempDir()
	files := map[string]int{}
	for i := range 7 {
		files[fmt.Sprintf("rank%d.pt", i)] = 1000 * (i + 1)
	}
	writeTree(t, dir, files)
	src := push(t, s.from, dir, 5)
	if !src.Sharded() {
		t.Fatal("the source manifest is not sharded")
	}
	if _, err := CopyStep(t.Context(), s.options(), 5); err != nil {
		t.Fatal(err)
	}
	dst, err := remote.Get(t.Context(), s.to, "moved/run", 5)
	if err != nil {
		t.Fatal(err)
	}
	if !dst.Sharded() || len(dst.Files) != len(files) || !manifest.SameContent(src, dst) {
		t.Fatalf("destination manifest: sharded %v, %d files", dst.Sharded(), len(dst.Files))
	}
	restoreEqual(t, s.to, "moved/run", 5, dir)
}
