package uploader

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/zeebo/blake3"

	"github.com/ferrylabs/ferry/agent/detect"
	"github.com/ferrylabs/ferry/internal/remote"
	"github.com/ferrylabs/ferry/internal/store"
)

const testPart = store.MinPartSize

func writeRandom(t *testing.T, path string, size int64, seed int64) []byte {
	t.Helper()
	data := make([]byte, size)
	rand.New(rand.NewSource(seed)).Read(data)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return data
}

func b3(data []byte) string {
	s := blake3.Sum256(data)
	return hex.EncodeToString(s[:])
}

func readObject(t *testing.T, st store.Store, key string) []byte {
	t.Helper()
	rc, err := st.Get(context.Background(), key, 0, -1)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// progressFuncs is a Progress of the funcs set.
type progressFuncs struct {
	sent, durable, deduplicated func(int64)
}

func (p progressFuncs) Sent(n int64)         { callIf(p.sent, n) }
func (p progressFuncs) Durable(n int64)      { callIf(p.durable, n) }
func (p progressFuncs) Deduplicated(n int64) { callIf(p.deduplicated, n) }

func callIf(f func(int64), n int64) {
	if f != nil {
		f(n)
	}
}

// pushCase is what a test may change about a push.
type pushCase struct {
	Destination
	PushOptions
}

func push(t *testing.T, st store.Store, dir string, step int64, stateDir string, mod func(*pushCase)) (PushResult, error) {
	t.Helper()
	s, _, err := detect.Gather([]string{dir}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.Number = step
	c := pushCase{
		Destination: Destination{Store: st, Location: "s3://bucket/run", Prefix: "run", StateDir: stateDir},
		PushOptions: PushOptions{Upload: Options{PartSize: testPart, Concurrency: 4}},
	}
	if mod != nil {
		mod(&c)
	}
	return c.Destination.Push(context.Background(), s, c.PushOptions)
}

func TestPushRoundTripSizes(t *testing.T) {
	sizes := map[string]int64{
		"empty":      0,
		"one":        1,
		"part-1":     testPart - 1,
		"part":       testPart,
		"part+1":     testPart + 1,
		"sub/many":   3*testPart + 12345,
		"sub/d/tiny": 17,
	}
	dir := t.TempDir()
	want := map[string][]byte{}
	var seed int64
	for name, size := range sizes {
		seed++
		want[name] = writeRandom(t, filepath.Join(dir, name), size, seed)
	}
	st := store.NewMemStore()
	res, err := push(t, st, dir, 1000, t.TempDir(), nil)
	if err != nil {
		t.Fatalf("push: %v", err)
	}
	if !res.Committed {
		t.Fatal("push did not commit")
	}
	m, err := remote.Get(context.Background(), st, "run", 1000)
	if err != nil {
		t.Fatalf("read committed manifest: %v", err)
	}
	if len(m.Files) != len(sizes) {
		t.Fatalf("manifest has %d files, want %d", len(m.Files), len(sizes))
	}
	for _, f := range m.Files {
		data := want[f.Path]
		if f.Size != int64(len(data)) || f.BLAKE3 != b3(data) {
			t.Errorf("%s: manifest size %d hash %s, want %d %s", f.Path, f.Size, f.BLAKE3, len(data), b3(data))
		}
		obj := readObject(t, st, f.Key)
		if int64(len(obj)) != f.ObjectSize() {
			t.Errorf("%s: object %s has %d bytes, manifest says %d", f.Path, f.Key, len(obj), f.ObjectSize())
		} else if got := obj[f.Offset : f.Offset+f.Size]; !bytes.Equal(got, data) {
			t.Errorf("%s: object bytes differ from the file", f.Path)
		}
		if f.Packed() != (f.Size < PackFileLimit) {
			t.Errorf("%s: %d bytes, packed %v; want files under %d bytes packed", f.Path, f.Size, f.Packed(), PackFileLimit)
		}
		wantPart := int64(0)
		if f.Size > testPart {
			wantPart = testPart
		}
		if f.PartSize != wantPart {
			t.Errorf("%s: part size %d, want %d", f.Path, f.PartSize, wantPart)
		}
	}
}

func TestPartSizeFor(t *testing.T) {
	cases := []struct{ size, req, want int64 }{
		{100, 64 << 20, 64 << 20},
		{1 << 40, 64 << 20, 105 << 20}, // 1 TiB / 10,000 rounded up to a MiB
		{100, 1, store.MinPartSize},
		{5 << 40, 5 << 30, store.MaxPartSize},
	}
	for _, c := range cases {
		got := objectPartSize(c.size, c.req)
		if got != c.want {
			t.Errorf("objectPartSize(%d, %d) = %d, want %d", c.size, c.req, got, c.want)
		}
		if (c.size+got-1)/got > store.MaxParts {
			t.Errorf("objectPartSize(%d, %d) = %d needs more than %d parts", c.size, c.req, got, store.MaxParts)
		}
	}
}

func TestPushResumesAfterFailure(t *testing.T) {
	dir := t.TempDir()
	big := writeRandom(t, filepath.Join(dir, "rank0.pt"), 6*testPart+99, 1)
	small := writeRandom(t, filepath.Join(dir, "config.json"), 300, 2)
	mem := store.NewMemStore()
	var parts atomic.Int32
	boom := errors.New("injected failure")
	faulty := &store.Faulty{Inner: mem, Before: func(op, key string) error {
		if op == "UploadPart" && parts.Add(1) > 3 {
			return boom
		}
		return nil
	}}
	stateDir := t.TempDir()
	_, err := push(t, faulty, dir, 7, stateDir, func(o *pushCase) { o.Upload.Concurrency = 1 })
	if !errors.Is(err, boom) {
		t.Fatalf("first push: got %v, want the injected failure", err)
	}
	if _, err := remote.Get(context.Background(), mem, "run", 7); !errors.Is(err, remote.ErrNoCheckpoint) {
		t.Fatalf("a failed push committed a manifest: %v", err)
	}
	faulty.Before = nil
	before := faulty.Count("UploadPart")
	res, err := push(t, faulty, dir, 7, stateDir, nil)
	if err != nil {
		t.Fatalf("resumed push: %v", err)
	}
	sentAgain := faulty.Count("UploadPart") - before
	if sentAgain != 7-3 {
		t.Errorf("resumed push sent %d parts, want %d (3 of 7 were already held)", sentAgain, 7-3)
	}
	if res.Stats.PartsResumed != 3 {
		t.Errorf("PartsResumed = %d, want 3", res.Stats.PartsResumed)
	}
	m := res.Manifest
	for _, f := range m.Files {
		want := map[string][]byte{"rank0.pt": big, "config.json": small}[f.Path]
		if got := readObject(t, mem, f.Key); !bytes.Equal(got, want) {
			t.Errorf("%s: object differs from the file", f.Path)
		}
	}
	if ents, _ := os.ReadDir(stateDir); len(ents) != 0 {
		t.Errorf("state dir not cleaned after commit: %v", ents)
	}
}

func TestPushIdempotentAndConflicting(t *testing.T) {
	dir := t.TempDir()
	writeRandom(t, filepath.Join(dir, "a.pt"), testPart+5, 1)
	st := &store.Faulty{Inner: store.NewMemStore()}
	if _, err := push(t, st, dir, 3, "", nil); err != nil {
		t.Fatal(err)
	}
	objects := st.Inner.(*store.MemStore).Objects()
	puts := st.Count("Put") + st.Count("UploadPart")
	res, err := push(t, st, dir, 3, "", nil)
	if err != nil {
		t.Fatalf("identical re-push: %v", err)
	}
	if res.Committed || res.Stats.BytesSent != 0 || st.Count("Put")+st.Count("UploadPart") != puts {
		t.Errorf("identical re-push uploaded something: committed=%v sent=%d", res.Committed, res.Stats.BytesSent)
	}
	writeRandom(t, filepath.Join(dir, "a.pt"), testPart+5, 2)
	_, err = push(t, st, dir, 3, "", nil)
	if !errors.Is(err, remote.ErrConflict) {
		t.Fatalf("conflicting re-push: got %v, want ErrConflict", err)
	}
	if after := st.Inner.(*store.MemStore).Objects(); len(after) != len(objects) {
		t.Errorf("conflicting push changed the bucket: %v -> %v", objects, after)
	}
}

func TestPushFailsWhenFileChanges(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "growing.pt")
	writeRandom(t, path, 3*testPart, 1)
	mem := store.NewMemStore()
	var once atomic.Bool
	// The trainer appends to the file while its first part is in flight.
	st := &store.Faulty{Inner: mem, Before: func(op, key string) error {
		if op == "UploadPart" && once.CompareAndSwap(false, true) {
			f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = f.Write([]byte("more"))
			return err
		}
		return nil
	}}
	_, err := push(t, st, dir, 5, "", func(o *pushCase) { o.Upload.Concurrency = 1 })
	if !errors.Is(err, ErrFileChanged) {
		t.Fatalf("got %v, want ErrFileChanged", err)
	}
	if _, err := remote.Get(context.Background(), mem, "run", 5); !errors.Is(err, remote.ErrNoCheckpoint) {
		t.Fatalf("a manifest was committed for a changing file: %v", err)
	}
}

// A step with no files is refused before any request unless AllowEmpty:
// an empty step would become "latest" and a restore would hand the
// trainer nothing. The agent's steps take the same path.
func TestPushRefusesEmptyStep(t *testing.T) {
	for _, nodes := range []int{1, 2} {
		counted := &countingStore{Store: store.NewMemStore()}
		_, err := push(t, counted, t.TempDir(), 5, t.TempDir(), func(o *pushCase) { o.Nodes = nodes })
		if !errors.Is(err, ErrEmptyStep) {
			t.Fatalf("%d nodes: push of an empty directory: %v, want ErrEmptyStep", nodes, err)
		}
		if n := counted.calls.Load(); n != 0 {
			t.Errorf("%d nodes: %d requests for a refused empty step, want 0", nodes, n)
		}
	}
	st := store.NewMemStore()
	if _, err := push(t, st, t.TempDir(), 5, "", func(o *pushCase) { o.AllowEmpty = true }); err != nil {
		t.Fatalf("push with AllowEmpty: %v", err)
	}
	m, err := remote.Get(context.Background(), st, "run", 5)
	if err != nil || len(m.Files) != 0 {
		t.Fatalf("with AllowEmpty: manifest %+v, %v; want an empty step committed", m, err)
	}
}

// countingStore counts every call made to it.
type countingStore struct {
	store.Store
	calls atomic.Int64
}

func (c *countingStore) Get(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	c.calls.Add(1)
	return c.Store.Get(ctx, key, off, n)
}

func (c *countingStore) Head(ctx context.Context, key string) (store.ObjectInfo, error) {
	c.calls.Add(1)
	return c.Store.Head(ctx, key)
}

func (c *countingStore) List(ctx context.Context, prefix, after string, max int, fn func(store.ObjectInfo) error) error {
	c.calls.Add(1)
	return c.Store.List(ctx, prefix, after, max, fn)
}

// Progress.Durable counts the bytes the server holds: every byte of the step once,
// whether sent or referenced from the previous step, never more.
func TestPushReportsDurableBytes(t *testing.T) {
	dir := t.TempDir()
	var total int64
	for i, size := range []int64{3*testPart + 17, 1000, 0} {
		writeRandom(t, filepath.Join(dir, fmt.Sprintf("f%d", i)), size, int64(i))
		total += size
	}
	st := store.NewMemStore()
	for step := int64(1); step <= 2; step++ { // step 2: every file deduplicated
		var durable atomic.Int64
		if _, err := push(t, st, dir, step, t.TempDir(), func(o *pushCase) { o.Progress = progressFuncs{durable: func(n int64) { durable.Add(n) }} }); err != nil {
			t.Fatal(err)
		}
		if got := durable.Load(); got != total {
			t.Errorf("step %d: Progress.Durable reported %d bytes, want %d", step, got, total)
		}
	}
}

// A file replaced between the moment its step was found complete and the
// upload (a copy killed halfway over it, a re-save begun) is refused, not
// uploaded as it is now: the step's evidence vouched for the bytes it saw.
// Both a packed small file and a file sent whole.
func TestPushRefusesFileNotAsFound(t *testing.T) {
	for _, size := range []int64{64 << 10, 3 * testPart} {
		dir := t.TempDir()
		path := filepath.Join(dir, "model_best.pth.tar")
		writeRandom(t, path, size, 1)
		writeRandom(t, filepath.Join(dir, "checkpoint.pth.tar"), 1<<10, 2)
		s, _, err := detect.Gather([]string{dir}, nil)
		if err != nil {
			t.Fatal(err)
		}
		s.Number = 7
		writeRandom(t, path, size/2, 3) // replaced after it was found
		mem := store.NewMemStore()
		d := Destination{Store: mem, Location: "s3://bucket/run", Prefix: "run"}
		_, err = d.Push(context.Background(), s, PushOptions{Upload: Options{PartSize: testPart, Concurrency: 4}})
		if !errors.Is(err, ErrFileChanged) {
			t.Fatalf("size %d: got %v, want ErrFileChanged", size, err)
		}
		if _, err := remote.Get(context.Background(), mem, "run", 7); !errors.Is(err, remote.ErrNoCheckpoint) {
			t.Fatalf("size %d: a manifest was committed: %v", size, err)
		}
	}
}
