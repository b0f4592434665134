package remote

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/manifest"
)

// nodePart returns node k's part of step 100 of an n-node job: one ranked
// file per node, and a config every node holds with the same content.
func nodePart(k, n int) *manifest.Part {
	r := k
	return &manifest.Part{
		Format: manifest.FormatVersion, Step: 100, NodeRank: k, Nodes: n,
		Created: time.Date(2026, 12, 2, 0, 0, k, 0, time.UTC),
		Files: []manifest.File{
			{Path: fmt.Sprintf("ckpt-rank%d.pt", k), Size: 10, BLAKE3: hashA, Key: fmt.Sprintf("run/data/000000000100/n%d/ckpt-rank%d.pt", k, k), Rank: &r},
			{Path: "config.json", Size: 3, BLAKE3: strings.Repeat("c", 64), Key: fmt.Sprintf("run/data/000000000100/n%d/config.json", k)},
		},
	}
}

// TestRunsNeverMix: a restarted job (another run) re-saves step 100 with
// other content; the parts the first run left never complete its set.
func TestRunsNeverMix(t *testing.T) {
	ctx := context.Background()
	st := store.NewMemStore()
	for k := range 2 {
		p := nodePart(k, 3)
		p.Run = "job-1.0"
		if _, err := CommitNodePart(ctx, st, "run", p); err != nil {
			t.Fatal(err)
		}
	}
	// The first run died before node 2 pushed. The second run's nodes 2,
	// then 0 and 1, with other content.
	for _, k := range []int{2, 0} {
		p := nodePart(k, 3)
		p.Run = "job-1.1"
		p.Files[0].BLAKE3 = strings.Repeat("f", 64)
		res, err := CommitNodePart(ctx, st, "run", p)
		if err != nil || res.Manifest != nil {
			t.Fatalf("run 2 node %d: %+v %v (a mixed set was committed?)", k, res, err)
		}
	}
	p := nodePart(1, 3)
	p.Run = "job-1.1"
	p.Files[0].BLAKE3 = strings.Repeat("f", 64)
	res, err := CommitNodePart(ctx, st, "run", p)
	if err != nil || !res.Committed {
		t.Fatalf("run 2 last node: %+v %v", res, err)
	}
	for _, f := range res.Manifest.Files {
		if f.Path != "config.json" && f.BLAKE3 != strings.Repeat("f", 64) {
			t.Errorf("%s comes from the first run", f.Path)
		}
	}
}

func TestCommitNodePartLastNodeCommits(t *testing.T) {
	ctx := context.Background()
	st := store.NewMemStore()
	for k := range 2 {
		res, err := CommitNodePart(ctx, st, "run", nodePart(k, 3))
		if err != nil || res.Manifest != nil || res.Committed || !res.PartWritten || res.Present != k+1 {
			t.Fatalf("node %d: %+v, %v", k, res, err)
		}
		if _, err := Get(ctx, st, "run", 100); !errors.Is(err, ErrNoCheckpoint) {
			t.Fatalf("step visible before every node finished: %v", err)
		}
	}
	res, err := CommitNodePart(ctx, st, "run", nodePart(2, 3))
	if err != nil || !res.Committed || res.Manifest == nil {
		t.Fatalf("last node: %+v, %v", res, err)
	}
	m, err := Get(ctx, st, "run", 100)
	if err != nil {
		t.Fatal(err)
	}
	if m.Nodes != 3 || len(m.Files) != 4 || m.Files[0].Path != "ckpt-rank0.pt" || m.Files[3].Path != "config.json" {
		t.Fatalf("merged manifest: %+v", m)
	}
	if !m.Created.Equal(nodePart(2, 3).Created) {
		t.Errorf("created = %v, want the latest part's", m.Created)
	}
	// The shared config is taken from the lowest node.
	if m.Files[3].Key != "run/data/000000000100/n0/config.json" {
		t.Errorf("config key = %q", m.Files[3].Key)
	}
	// A node re-running the step finds its identical part and the manifest.
	res, err = CommitNodePart(ctx, st, "run", nodePart(1, 3))
	if err != nil || res.PartWritten || res.Committed || res.Manifest == nil {
		t.Fatalf("re-run: %+v, %v", res, err)
	}
}

func TestCommitNodePartConflicts(t *testing.T) {
	ctx := context.Background()
	st := store.NewMemStore()
	if _, err := CommitNodePart(ctx, st, "run", nodePart(0, 2)); err != nil {
		t.Fatal(err)
	}
	diff := nodePart(0, 2)
	diff.Files[0].BLAKE3 = strings.Repeat("d", 64)
	if _, err := CommitNodePart(ctx, st, "run", diff); !errors.Is(err, ErrPartConflict) {
		t.Fatalf("different part content: %v", err)
	}
	// Node 1 holds the shared config with other content: no manifest.
	bad := nodePart(1, 2)
	bad.Files[1].BLAKE3 = strings.Repeat("e", 64)
	_, err := CommitNodePart(ctx, st, "run", bad)
	if err == nil || !strings.Contains(err.Error(), "nodes 0 and 1 both hold config.json") {
		t.Fatalf("colliding paths: %v", err)
	}
	if _, err := Get(ctx, st, "run", 100); !errors.Is(err, ErrNoCheckpoint) {
		t.Fatalf("a step with colliding parts was committed: %v", err)
	}
}

// TestCommitNodePartRaces runs N nodes committing the same step at once,
// many times: exactly one manifest, identical to what any node computes.
func TestCommitNodePartRaces(t *testing.T) {
	ctx := context.Background()
	const nodes = 5
	parts := make([]*manifest.Part, nodes)
	for k := range nodes {
		parts[k] = nodePart(k, nodes)
	}
	want, err := manifest.MergeParts(parts)
	if err != nil {
		t.Fatal(err)
	}
	wantBytes, _ := manifest.Encode(want)
	for round := range 50 {
		mem := store.NewMemStore()
		st := &store.Faulty{Inner: mem}
		var wg sync.WaitGroup
		results := make([]NodeCommit, nodes)
		errs := make([]error, nodes)
		start := make(chan struct{})
		for k := range nodes {
			wg.Go(func() {
				<-start
				results[k], errs[k] = CommitNodePart(ctx, st, "run", parts[k])
			})
		}
		close(start)
		wg.Wait()
		committed, merged := 0, 0
		for k := range nodes {
			if errs[k] != nil {
				t.Fatalf("round %d node %d: %v", round, k, errs[k])
			}
			if results[k].Committed {
				committed++
			}
			if results[k].Merged {
				merged++
			}
		}
		if committed != 1 || merged != 1 {
			t.Fatalf("round %d: %d nodes wrote the manifest, %d merged", round, committed, merged)
		}
		if n := len(mem.Objects()); n != nodes+3 {
			t.Fatalf("round %d: %d objects, want %d parts, one manifest, the claim and the done marker", round, n, nodes)
		}
		rc, err := mem.Get(ctx, manifest.ManifestKey("run", 100), 0, -1)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		var got bytes.Buffer
		_, _ = got.ReadFrom(rc)
		rc.Close()
		if !bytes.Equal(got.Bytes(), wantBytes) {
			t.Fatalf("round %d: manifest depends on who wrote it:\n%s\nwant\n%s", round, got.Bytes(), wantBytes)
		}
	}
}

func TestStepAtOrBeforeAndContains(t *testing.T) {
	ctx := context.Background()
	st := store.NewMemStore()
	if _, err := StepAtOrBefore(ctx, st, "run", 10); !errors.Is(err, ErrNoCheckpoint) {
		t.Fatalf("empty: %v", err)
	}
	for _, step := range []int64{3, 7, 12} {
		m := valid()
		m.Step = step
		if _, _, err := Commit(ctx, st, "run", m); err != nil {
			t.Fatal(err)
		}
	}
	for step, want := range map[int64]int64{10: 7, 7: 7, 6: 3, 12: 12, 100: 12} {
		if got, err := StepAtOrBefore(ctx, st, "run", step); err != nil || got != want {
			t.Errorf("StepAtOrBefore(%d) = %d, %v; want %d", step, got, err, want)
		}
	}
	if _, err := StepAtOrBefore(ctx, st, "run", 2); !errors.Is(err, ErrNoCheckpoint) {
		t.Errorf("StepAtOrBefore(2) = %v", err)
	}
	m := valid()
	sub := valid()
	sub.Files = sub.Files[:1]
	sub.Symlinks = nil
	if !manifest.Contains(m, sub) || manifest.Contains(sub, m) {
		t.Error("Contains")
	}
}
