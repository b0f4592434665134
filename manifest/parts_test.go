package manifest

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// nodePart returns node k's part of step 100 of an n-node job: one ranked
// file per node, and a config every node holds with the same content.
func nodePart(k, n int) *Part {
	r := k
	return &Part{
		Format: FormatVersion, Step: 100, NodeRank: k, Nodes: n,
		Created: time.Date(2026, 12, 2, 0, 0, k, 0, time.UTC),
		Files: []File{
			{Path: fmt.Sprintf("ckpt-rank%d.pt", k), Size: 10, BLAKE3: hashA, Key: fmt.Sprintf("run/data/000000000100/n%d/ckpt-rank%d.pt", k, k), Rank: &r},
			{Path: "config.json", Size: 3, BLAKE3: strings.Repeat("c", 64), Key: fmt.Sprintf("run/data/000000000100/n%d/config.json", k)},
		},
	}
}

func TestPartKeys(t *testing.T) {
	set := PartSet{Step: 100, Nodes: 3}
	key := PartKey("run", set, 1)
	if key != "run/parts/000000000100/of-00003/node-00001.json" {
		t.Fatalf("PartKey = %q", key)
	}
	other := PartSet{Step: 100, Nodes: 30}
	withRun := PartSet{Step: 100, Nodes: 3, Run: "job-77.1"}
	if !strings.HasPrefix(key, StepPartsPrefix("run", set)) || strings.HasPrefix(PartKey("run", other, 1), StepPartsPrefix("run", set)) ||
		strings.HasPrefix(PartKey("run", withRun, 1), StepPartsPrefix("run", set)) {
		t.Fatal("a set's prefix must hold exactly the parts of that node count and run")
	}
	if got := PartKey("run", withRun, 2); got != "run/parts/000000000100/run-job-77.1/of-00003/node-00002.json" {
		t.Fatalf("PartKey with run = %q", got)
	}
	for _, c := range []struct {
		set  PartSet
		rank int
	}{{set, 1}, {withRun, 2}, {other, 29}} {
		got, k, ok := ParsePartKey("run", PartKey("run", c.set, c.rank))
		if !ok || got != c.set || k != c.rank {
			t.Errorf("ParsePartKey(PartKey(%v, %d)) = %v %d %v", c.set, c.rank, got, k, ok)
		}
	}
	for _, bad := range []string{"run/parts/000000000100/of-00003/node-00003.json", "run/parts/x", "run/parts/000000000100/of-00000/node-00000.json",
		"run/parts/000000000100/run-/of-00003/node-00000.json", "run/parts/000000000100/run-a b/of-00003/node-00000.json"} {
		if _, _, ok := ParsePartKey("run", bad); ok {
			t.Errorf("%q parsed", bad)
		}
	}
	for _, bad := range []string{".x", "a/b", "a b", strings.Repeat("x", MaxRunLen+1)} {
		if CheckRun(bad) == nil {
			t.Errorf("CheckRun(%q) accepted", bad)
		}
	}
	if s, ok := StepFromPrunedKey("run", PrunedKey("run", 42)); !ok || s != 42 {
		t.Errorf("StepFromPrunedKey = %d %v", s, ok)
	}
}

func TestValidatePartRejects(t *testing.T) {
	for name, mod := range map[string]func(p *Part){
		"rank too high": func(p *Part) { p.NodeRank = 3 },
		"bad run":       func(p *Part) { p.Run = "a/b" },
		"no nodes":      func(p *Part) { p.Nodes = 0 },
		"bad path":      func(p *Part) { p.Files[0].Path = "../x" },
		"bad key":       func(p *Part) { p.Files[0].Key = "other/x" },
	} {
		p := nodePart(1, 3)
		mod(p)
		if err := ValidatePart(p, "run"); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestMergePartsRejectsIncompleteSet(t *testing.T) {
	if _, err := MergeParts([]*Part{nodePart(0, 3), nodePart(2, 3)}); err == nil {
		t.Fatal("merged a set missing node 1")
	}
}

// TestMergePartsLayout: the merged manifest records the layout the nodes
// agree on, and none when they disagree.
func TestMergePartsLayout(t *testing.T) {
	a, b := nodePart(0, 2), nodePart(1, 2)
	a.Layout, b.Layout = "dcp", "dcp"
	if m, err := MergeParts([]*Part{a, b}); err != nil || m.Layout != "dcp" {
		t.Fatalf("agreeing nodes: layout %q, %v", m.Layout, err)
	}
	b.Layout = "flat"
	if m, err := MergeParts([]*Part{a, b}); err != nil || m.Layout != "" {
		t.Fatalf("disagreeing nodes: layout %q, %v", m.Layout, err)
	}
}

func TestMarkerKeys(t *testing.T) {
	for _, set := range []PartSet{{Step: 7, Nodes: 3}, {Step: 7, Nodes: 3, Run: "r-1"}} {
		for _, key := range []string{ClaimKey("run", set), DoneKey("run", set)} {
			if got, ok := ParseMarkerKey("run", key); !ok || got != set {
				t.Errorf("ParseMarkerKey(%q) = %v %v", key, got, ok)
			}
			if _, _, ok := ParsePartKey("run", key); ok {
				t.Errorf("%q parsed as a part", key)
			}
		}
	}
	for _, bad := range []string{"run/parts/000000000007/of-00003/claim.jsonx", "run/parts/x/claim.json", "run/parts/000000000007/of-00000/done.json"} {
		if _, ok := ParseMarkerKey("run", bad); ok {
			t.Errorf("%q parsed as a marker", bad)
		}
	}
}
