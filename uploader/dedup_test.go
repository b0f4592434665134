package uploader

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/agent/detect"
	"github.com/ferrylabs/ferry/internal/remote"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/manifest"
)

// TestPushDedup pushes a checkpoint whose files are 80% unchanged by bytes
// between two steps: the second push sends only the changed 20%, references
// the first step's objects for the rest, and reads each unchanged file once.
func TestPushDedup(t *testing.T) {
	dir := t.TempDir()
	// 4 unchanged files of 2 parts each (multipart and single PUT) and one
	// that changes with the same size: 80% of bytes unchanged.
	sizes := map[string]int64{"frozen/a.bin": 2 * testPart, "frozen/b.bin": 2 * testPart, "tok.bin": testPart, "cfg.bin": 3 * testPart, "w.bin": 2 * testPart}
	var seed int64
	for name, size := range sizes {
		seed++
		writeRandom(t, filepath.Join(dir, name), size, seed)
	}
	var total int64
	for _, n := range sizes {
		total += n
	}
	st := &store.Faulty{Inner: store.NewMemStore()}
	first, err := push(t, st, dir, 10, t.TempDir(), nil)
	if err != nil || first.Stats.DedupBytes != 0 || first.Stats.BytesSent != total {
		t.Fatalf("first push: %+v %v", first.Stats, err)
	}
	changed := writeRandom(t, filepath.Join(dir, "w.bin"), 2*testPart, 99)
	var deduped atomic.Int64
	second, err := push(t, st, dir, 20, t.TempDir(), func(o *pushCase) { o.Progress = progressFuncs{deduplicated: func(n int64) { deduped.Add(n) }} })
	if err != nil {
		t.Fatal(err)
	}
	s := second.Stats
	t.Logf("second push: sent %d of %d bytes (%.0f%%), deduplicated %d, hashed %d", s.BytesSent, total, 100*float64(s.BytesSent)/float64(total), s.DedupBytes, s.BytesHashed)
	if s.BytesSent != 2*testPart || s.DedupBytes != total-2*testPart || s.DedupFiles != 4 || deduped.Load() != s.DedupBytes {
		t.Fatalf("second push stats %+v (Progress.Deduplicated %d)", s, deduped.Load())
	}
	// Every file read once: unchanged ones by the comparison, the changed
	// one by the comparison too, whose hashes its send reuses.
	if s.BytesHashed != total {
		t.Errorf("hashed %d bytes, want %d (each file read once)", s.BytesHashed, total)
	}
	prev := map[string]manifest.File{}
	for _, f := range first.Manifest.Files {
		prev[f.Path] = f
	}
	for _, f := range second.Manifest.Files {
		want, _ := os.ReadFile(filepath.Join(dir, f.Path))
		if got := readObject(t, st, f.Key); !bytes.Equal(got, want) || f.BLAKE3 != b3(want) {
			t.Errorf("%s: object or hash differs from the file", f.Path)
		}
		reused := f.Key == prev[f.Path].Key
		if reused != (f.Path != "w.bin") {
			t.Errorf("%s: key %s (previous %s)", f.Path, f.Key, prev[f.Path].Key)
		}
		if reused && f.PartSize != prev[f.Path].PartSize {
			t.Errorf("%s: part size %d, previous %d", f.Path, f.PartSize, prev[f.Path].PartSize)
		}
	}
	if !bytes.Equal(readObject(t, st, keyOf(second.Manifest, "w.bin")), changed) {
		t.Error("changed file's object is wrong")
	}
	// Deduplication looks only at the previous committed step.
	if _, err := push(t, st, dir, 15, "", func(o *pushCase) { o.NoDedup = true }); err != nil {
		t.Fatal(err)
	}
}

func keyOf(m *manifest.Manifest, path string) string {
	for _, f := range m.Files {
		if f.Path == path {
			return f.Key
		}
	}
	return ""
}

// TestPushDedupLoserKeepsReferencedObjects: a push that loses the commit
// race deletes its own objects, never the earlier step's objects its
// entries referenced.
func TestPushDedupLoserKeepsReferencedObjects(t *testing.T) {
	dir := t.TempDir()
	writeRandom(t, filepath.Join(dir, "frozen.bin"), 100, 1)
	writeRandom(t, filepath.Join(dir, "w.bin"), 100, 2)
	mem := store.NewMemStore()
	first, err := push(t, mem, dir, 1, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	writeRandom(t, filepath.Join(dir, "w.bin"), 100, 3)
	if _, err := push(t, mem, dir, 2, "", nil); err != nil {
		t.Fatal(err)
	}
	// Another push of step 2 that raced and lost: it uploaded (its
	// manifest check ran before the winner's commit).
	var raced atomic.Bool
	st := &store.Faulty{Inner: mem, Before: func(op, key string) error {
		if op == "Get" && key == manifest.ManifestKey("run", 2) && raced.CompareAndSwap(false, true) {
			return store.ErrNotExist
		}
		return nil
	}}
	res, err := push(t, st, dir, 2, "", nil)
	if err != nil || res.Committed {
		t.Fatalf("losing push: %+v %v", res, err)
	}
	for _, f := range first.Manifest.Files {
		if f.Path == "frozen.bin" {
			if _, err := mem.Head(context.Background(), f.Key); err != nil {
				t.Fatalf("the loser deleted a referenced object of step 1: %v", err)
			}
		}
	}
	// The loser's own objects, its pack included, are gone: every object
	// of step 2 left is one the committed manifest names.
	won, err := remote.Get(context.Background(), mem, "run", 2)
	if err != nil {
		t.Fatal(err)
	}
	named := map[string]bool{}
	for _, f := range won.Files {
		named[f.Key] = true
	}
	err = mem.List(context.Background(), manifest.DataPrefix("run")+manifest.StepString(2)+"/", "", 0, func(o store.ObjectInfo) error {
		if !named[o.Key] {
			return fmt.Errorf("the losing push left %s", o.Key)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestPushDedupResumes(t *testing.T) {
	dir := t.TempDir()
	writeRandom(t, filepath.Join(dir, "frozen.bin"), 3*testPart, 1)
	writeRandom(t, filepath.Join(dir, "w.bin"), 4*testPart, 2)
	mem := store.NewMemStore()
	if _, err := push(t, mem, dir, 1, "", nil); err != nil {
		t.Fatal(err)
	}
	writeRandom(t, filepath.Join(dir, "w.bin"), 4*testPart, 3)
	var parts atomic.Int32
	boom := errors.New("injected")
	st := &store.Faulty{Inner: mem, Before: func(op, key string) error {
		if op == "UploadPart" && parts.Add(1) > 2 {
			return boom
		}
		return nil
	}}
	stateDir := t.TempDir()
	if _, err := push(t, st, dir, 2, stateDir, func(o *pushCase) { o.Upload.Concurrency = 1 }); !errors.Is(err, boom) {
		t.Fatalf("first attempt: %v", err)
	}
	st.Before = nil
	res, err := push(t, st, dir, 2, stateDir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Stats.PartsResumed != 2 || res.Stats.PartsSent != 2 || res.Stats.DedupFiles != 1 {
		t.Fatalf("resumed push: %+v", res.Stats)
	}
	for _, f := range res.Manifest.Files {
		want, _ := os.ReadFile(filepath.Join(dir, f.Path))
		if !bytes.Equal(readObject(t, mem, f.Key), want) {
			t.Errorf("%s differs", f.Path)
		}
	}
}

// nodeDirs writes the files of an n-node job with ranksPerNode ranks each.
func nodeDirs(t *testing.T, n, ranksPerNode int, size int64, seed int64) []string {
	t.Helper()
	dirs := make([]string, n)
	for k := range n {
		dirs[k] = t.TempDir()
		for r := k * ranksPerNode; r < (k+1)*ranksPerNode; r++ {
			writeRandom(t, filepath.Join(dirs[k], "ckpt", "rank"+strconv.Itoa(r)+".pt"), size, seed+int64(r))
		}
		if k == 0 {
			writeRandom(t, filepath.Join(dirs[k], "ckpt", "config.json"), 50, seed+1000)
		}
	}
	return dirs
}

func TestPushMultiNode(t *testing.T) {
	ctx := context.Background()
	mem := store.NewMemStore()
	dirs := nodeDirs(t, 3, 2, testPart+10, 1)
	stateDir := t.TempDir() // shared by the three "nodes": their state must not mix
	// Each node's files at times of their own, to the nanosecond: the
	// merged manifest carries every node's.
	mtimes := map[string]manifest.NanoTime{}
	for k, dir := range dirs {
		ents, _ := os.ReadDir(filepath.Join(dir, "ckpt"))
		for i, e := range ents {
			when := time.Date(2026, 12, 1, 10, k, i, 1000*k+i+1, time.UTC)
			if err := os.Chtimes(filepath.Join(dir, "ckpt", e.Name()), when, when); err != nil {
				t.Fatal(err)
			}
			mtimes["ckpt/"+e.Name()] = manifest.TimeOf(when)
		}
	}
	for k := range 3 {
		res, err := push(t, mem, dirs[k], 50, stateDir, func(o *pushCase) { o.Nodes, o.NodeRank = 3, k })
		if err != nil {
			t.Fatalf("node %d: %v", k, err)
		}
		if last := k == 2; res.Committed != last || res.Pending == last || res.PartsPresent != k+1 {
			t.Fatalf("node %d: committed=%v pending=%v present=%d", k, res.Committed, res.Pending, res.PartsPresent)
		}
		if _, err := remote.Get(ctx, mem, "run", 50); errors.Is(err, remote.ErrNoCheckpoint) != (k < 2) {
			t.Fatalf("after node %d: manifest %v", k, err)
		}
	}
	m, _ := remote.Get(ctx, mem, "run", 50)
	if m.Nodes != 3 || len(m.Files) != 7 {
		t.Fatalf("manifest: nodes %d, %d files", m.Nodes, len(m.Files))
	}
	for _, f := range m.Files {
		if f.MTime != mtimes[f.Path] {
			t.Errorf("%s: merged manifest has mtime %v, its node's file %v", f.Path, f.MTime.Time(), mtimes[f.Path].Time())
		}
	}
	// Re-running a node after the commit checks its files against the step.
	res, err := push(t, mem, dirs[1], 50, stateDir, func(o *pushCase) { o.Nodes, o.NodeRank = 3, 1 })
	if err != nil || res.Committed || res.Stats.BytesSent != 0 {
		t.Fatalf("re-run: %+v %v", res, err)
	}
	writeRandom(t, filepath.Join(dirs[1], "ckpt", "rank2.pt"), testPart+10, 77)
	if _, err := push(t, mem, dirs[1], 50, stateDir, func(o *pushCase) { o.Nodes, o.NodeRank = 3, 1 }); !errors.Is(err, remote.ErrConflict) {
		t.Fatalf("changed node files: %v", err)
	}
	if ents, _ := os.ReadDir(stateDir); len(ents) != 0 {
		t.Errorf("state left behind: %v", ents)
	}
}

// TestPushMultiNodeCrashBeforeCommit: the last node writes its part and
// stops before listing; the step stays uncommitted until it runs again.
func TestPushMultiNodeCrashBeforeCommit(t *testing.T) {
	ctx := context.Background()
	mem := store.NewMemStore()
	dirs := nodeDirs(t, 2, 1, 1000, 1)
	if _, err := push(t, mem, dirs[0], 7, "", func(o *pushCase) { o.Nodes, o.NodeRank = 2, 0 }); err != nil {
		t.Fatal(err)
	}
	crash := errors.New("killed")
	st := &store.Faulty{Inner: mem, Before: func(op, key string) error {
		if op == "List" && strings.Contains(key, "/parts/") {
			return crash
		}
		return nil
	}}
	stateDir := t.TempDir()
	if _, err := push(t, st, dirs[1], 7, stateDir, func(o *pushCase) { o.Nodes, o.NodeRank = 2, 1 }); !errors.Is(err, crash) {
		t.Fatalf("crashing node: %v", err)
	}
	if _, err := remote.Get(ctx, mem, "run", 7); !errors.Is(err, remote.ErrNoCheckpoint) {
		t.Fatalf("step visible: %v", err)
	}
	st.Before = nil
	res, err := push(t, st, dirs[1], 7, stateDir, func(o *pushCase) { o.Nodes, o.NodeRank = 2, 1 })
	if err != nil || !res.Committed || res.Stats.BytesSent != 0 {
		t.Fatalf("restarted node: committed=%v sent=%d %v", res.Committed, res.Stats.BytesSent, err)
	}
	if ents, _ := os.ReadDir(stateDir); len(ents) != 0 {
		t.Errorf("state left behind: %v", ents)
	}
}

func TestPushRejectsBadNodeRank(t *testing.T) {
	dir := t.TempDir()
	writeRandom(t, filepath.Join(dir, "a"), 1, 1)
	if _, err := push(t, store.NewMemStore(), dir, 1, "", func(o *pushCase) { o.Nodes, o.NodeRank = 2, 2 }); err == nil {
		t.Fatal("node rank 2 of 2 accepted")
	}
}

// TestPushDedupAcrossStepFolders: layouts that give every step its own
// folder (checkpoint-100/, checkpoint-200/) still deduplicate unchanged
// files, matched without the step folder.
func TestPushDedupAcrossStepFolders(t *testing.T) {
	dir := t.TempDir()
	for i, step := range []string{"checkpoint-100", "checkpoint-200"} {
		writeRandom(t, filepath.Join(dir, step, "tokenizer.json"), 5000, 1)
		writeRandom(t, filepath.Join(dir, step, "model.safetensors"), 7000, int64(10+i))
	}
	mem := store.NewMemStore()
	for i, step := range []string{"checkpoint-100", "checkpoint-200"} {
		all, _, err := detect.Gather([]string{dir}, nil)
		if err != nil {
			t.Fatal(err)
		}
		s := detect.Step{Number: int64(100 * (i + 1)), Root: step}
		for _, f := range all.Files {
			if strings.HasPrefix(f.RelPath, step+"/") {
				s.Files = append(s.Files, f)
			}
		}
		res, err := Destination{Store: mem, Location: "x", Prefix: "run"}.Push(context.Background(), s, PushOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if want := int64(i * 5000); res.Stats.DedupBytes != want {
			t.Errorf("%s: deduplicated %d bytes, want %d", step, res.Stats.DedupBytes, want)
		}
	}
	if dedupKey("a/b/c", "x/y") != "c" || dedupKey("a", "x") != "" || dedupKey("a/b", "") != "a/b" {
		t.Error("dedupKey")
	}
}
