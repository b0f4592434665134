package remote

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/manifest"
)

// smallShards makes every manifest sharded, three files a shard.
func smallShards(t *testing.T) {
	t.Cleanup(manifest.SetShardThresholds(1, 3))
}

// rankedManifest has 2 files for each of 5 ranks, 2 shared files and a link.
func rankedManifest() *manifest.Manifest {
	m := &manifest.Manifest{Format: manifest.FormatVersion, Step: 42, Created: time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC),
		Symlinks: []manifest.Symlink{{Path: "latest", Target: "model-rank0-a.pt"}}}
	for r := range 5 {
		for _, s := range []string{"a", "b"} {
			rank := r
			p := fmt.Sprintf("model-rank%d-%s.pt", r, s)
			m.Files = append(m.Files, manifest.File{Path: p, Size: int64(r + 1), BLAKE3: hashA, Key: manifest.DataKey("run", 42, "x", p), Rank: &rank})
		}
	}
	for _, p := range []string{"config.json", "tokenizer.json"} {
		m.Files = append(m.Files, manifest.File{Path: p, Size: 7, BLAKE3: hashA, Key: manifest.DataKey("run", 42, "x", p)})
	}
	return m
}

func TestShardedCommitAndGet(t *testing.T) {
	smallShards(t)
	ctx := context.Background()
	mem := store.NewMemStore()
	want := rankedManifest()
	got, committed, err := Commit(ctx, mem, "run", want)
	if err != nil || !committed || got.Format != manifest.ShardedFormat || len(got.Shards) != 4 {
		t.Fatalf("commit: format %s, %d shards, committed %v, %v", got.Format, len(got.Shards), committed, err)
	}
	// The manifest object lists shards and no files.
	rc, err := mem.Get(ctx, manifest.ManifestKey("run", 42), 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(rc)
	rc.Close()
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(raw, &doc); err != nil || string(doc["files"]) != "null" && string(doc["files"]) != "[]" || doc["shards"] == nil {
		t.Fatalf("manifest document: files %s, shards %d bytes, %v", doc["files"], len(doc["shards"]), err)
	}
	full, err := Get(ctx, mem, "run", 42)
	if err != nil {
		t.Fatal(err)
	}
	if !manifest.SameContent(full, want) || len(full.Symlinks) != 1 || full.Files[0].Path != "config.json" {
		t.Fatalf("Get of a sharded manifest: %d files, first %q", len(full.Files), full.Files[0].Path)
	}
	// The same content again is no conflict.
	if _, committed, err := Commit(ctx, mem, "run", rankedManifest()); err != nil || committed {
		t.Fatalf("identical re-commit: %v %v", committed, err)
	}
}

// TestShardedGetFiltered: a reader of rank 4 reads only the shards holding
// rank 4 or shared files, and gets all of those files.
func TestShardedGetFiltered(t *testing.T) {
	smallShards(t)
	ctx := context.Background()
	mem := store.NewMemStore()
	if _, _, err := Commit(ctx, mem, "run", rankedManifest()); err != nil {
		t.Fatal(err)
	}
	st := &store.Faulty{Inner: mem}
	m, err := GetFiltered(ctx, st, "run", 42, manifest.RanksFilter(func(r *int) bool { return *r == 4 }))
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, f := range m.Files {
		if f.Rank == nil || *f.Rank == 4 {
			paths = append(paths, f.Path)
		}
	}
	if strings.Join(paths, " ") != "config.json model-rank4-a.pt model-rank4-b.pt tokenizer.json" {
		t.Fatalf("files of rank 4 and shared: %v", paths)
	}
	// Ranks sort 0,0,1 | 1,2,2 | 3,3,4 | 4,shared,shared: two shards of four.
	if n := st.Count("Get"); n != 3 {
		t.Errorf("%d GETs, want the manifest and 2 shards", n)
	}
}

// TestShardedRejectsTampering: a shard whose bytes changed, or that lies
// about its ranks, fails the read naming the shard.
func TestShardedRejectsTampering(t *testing.T) {
	smallShards(t)
	ctx := context.Background()
	mem := store.NewMemStore()
	c, _, err := Commit(ctx, mem, "run", rankedManifest())
	if err != nil {
		t.Fatal(err)
	}
	key := c.Shards[1].Key
	rc, _ := mem.Get(ctx, key, 0, -1)
	data, _ := io.ReadAll(rc)
	rc.Close()
	bad := bytes.Replace(data, []byte(`"size": 2`), []byte(`"size": 9`), 1)
	if _, err := mem.Put(ctx, key, bytes.NewReader(bad), int64(len(bad)), store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := Get(ctx, mem, "run", 42); err == nil || !strings.Contains(err.Error(), key) {
		t.Fatalf("tampered shard: %v", err)
	}
	// A manifest whose shard claims other ranks than it holds.
	h, err := getHeader(ctx, mem, "run", 42)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mem.Put(ctx, key, bytes.NewReader(data), int64(len(data)), store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	seven := 7
	h.Shards[1].MaxRank = &seven
	if _, err := Resolve(ctx, mem, "run", h, nil); err == nil || !strings.Contains(err.Error(), "ranks") {
		t.Fatalf("shard lying about its ranks: %v", err)
	}
}

// TestShardedSummary: `ferry list` counts a sharded step's files and bytes
// from the manifest alone.
func TestShardedSummary(t *testing.T) {
	smallShards(t)
	ctx := context.Background()
	mem := store.NewMemStore()
	m := rankedManifest()
	if _, _, err := Commit(ctx, mem, "run", m); err != nil {
		t.Fatal(err)
	}
	st := &store.Faulty{Inner: mem}
	rows, err := Summaries(ctx, st, "run", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].Files != len(m.Files) || rows[0].Bytes != m.TotalBytes() {
		t.Fatalf("summary %+v, want %d files, %d bytes", rows, len(m.Files), m.TotalBytes())
	}
	if n := st.Count("Get"); n != 1 {
		t.Errorf("%d GETs for the summary of a sharded step, want the manifest alone", n)
	}
}
