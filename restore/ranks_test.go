package restore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/manifest"
)

func TestParseRanks(t *testing.T) {
	r, err := ParseRanks("8, 0-3,2-4,10")
	if err != nil {
		t.Fatal(err)
	}
	if r.String() != "0-4,8,10" {
		t.Errorf("String = %q", r.String())
	}
	for rank, want := range map[int]bool{0: true, 4: true, 5: false, 8: true, 9: false, 10: true, 11: false} {
		if r.Contains(rank) != want {
			t.Errorf("Contains(%d) = %v", rank, !want)
		}
	}
	for _, bad := range []string{"", "a", "3-1", "1,,2", "-1", "1-", "99999999"} {
		if _, err := ParseRanks(bad); err == nil {
			t.Errorf("ParseRanks(%q) accepted", bad)
		}
	}
}

func ranked(paths ...string) *manifest.Manifest {
	m := &manifest.Manifest{Step: 9}
	for _, p := range paths {
		name, r, _ := strings.Cut(p, "@")
		f := manifest.File{Path: name}
		if r != "" {
			n, _ := strconv.Atoi(r)
			f.Rank = &n
		}
		m.Files = append(m.Files, f)
	}
	return m
}

func TestSelectForNode(t *testing.T) {
	four := ranked("r0.pt@0", "r1.pt@1", "r2.pt@2", "r3.pt@3", "cfg.json")
	// A DCP step whose .metadata is not among the files (a rank-split
	// checkpoint of a custom writer): the recorded layout decides.
	recorded := ranked("__0_0.distcp@0", "__1_0.distcp@1")
	recorded.Layout = "dcp"
	cases := []struct {
		m           *manifest.Manifest
		nodes, node int
		want        string // Selection.String, or "error"
	}{
		{four, 2, 0, "ranks 0-1 of 4 and shared files"},
		{four, 2, 1, "ranks 2-3 of 4 and shared files"},
		{four, 1, 0, "ranks 0-3 of 4 and shared files"},
		{four, 4, 3, "ranks 3 of 4 and shared files"},
		{four, 3, 0, "error"},
		{four, 8, 0, "error"},
		{four, 2, 2, "error"},
		{ranked("__0_0.distcp@0", "__1_0.distcp@1", ".metadata"), 2, 1, "all files (the layout (PyTorch DCP) reshards at load: every node reads every file)"},
		{ranked("iter_0000010/mp_rank_00/model_optim_rng.pt@0", "iter_0000010/mp_rank_01/model_optim_rng.pt@1"), 2, 0, "all files (Megatron mp_rank folders hold model-parallel ranks that every data-parallel replica reads)"},
		{ranked("model.safetensors", "config.json"), 4, 2, "all files (no file has a rank: every file is shared)"},
		{recorded, 2, 1, "all files (the layout (PyTorch DCP, recorded in the manifest) reshards at load: every node reads every file)"},
		{ranked("__0_0.distcp@0", "__1_0.distcp@1"), 2, 1, "ranks 1 of 2 and shared files"},
	}
	for _, c := range cases {
		sel, err := SelectForNode(c.m, c.nodes, c.node)
		got := sel.String()
		if err != nil {
			got = "error"
		}
		if got != c.want {
			t.Errorf("SelectForNode(%v, %d, %d) = %q (%v), want %q", c.m.Files[0].Path, c.nodes, c.node, got, err, c.want)
		}
	}
}

// TestRestoreOntoFewerAndMoreNodes restores a 4-rank step (written by 2
// nodes of 2 ranks) onto 1, 2 and 4 nodes and checks every node's files,
// one by one: its ranks' files, every shared file, no other rank's file.
func TestRestoreOntoFewerAndMoreNodes(t *testing.T) {
	st := store.NewMemStore()
	var files []tfile
	for r := range 4 {
		files = append(files, tfile{path: fmt.Sprintf("ep0-ba10-rank%d.pt", r), data: randBytes(100+r, uint64(r)), rank: rank(r)})
	}
	files = append(files, tfile{path: "config.json", data: []byte("{}")})
	commit(t, st, 10, files, []manifest.Symlink{{Path: "latest-rank0.pt", Target: "ep0-ba10-rank0.pt"}})
	for _, nodes := range []int{1, 2, 4} {
		per := 4 / nodes
		for node := range nodes {
			dir := t.TempDir()
			res, err := Restore(context.Background(), Options{Store: st, Prefix: testPrefix, Dir: dir, Step: LatestStep, Nodes: nodes, NodeRank: node})
			if err != nil {
				t.Fatalf("%d nodes, node %d: %v", nodes, node, err)
			}
			for _, f := range files {
				p := dir + "/" + f.path
				if f.rank == nil || *f.rank/per == node {
					assertFile(t, p, f.data)
				} else {
					assertAbsent(t, p)
				}
			}
			if res.Selection == nil || res.Selection.All || res.Files != per+1 {
				t.Errorf("%d nodes, node %d: %+v selection %v", nodes, node, res, res.Selection)
			}
		}
	}
	if _, err := Restore(context.Background(), Options{Store: st, Prefix: testPrefix, Dir: t.TempDir(), Step: LatestStep, Nodes: 3}); err == nil ||
		!strings.Contains(err.Error(), "do not split evenly over 3 nodes") {
		t.Fatalf("4 ranks over 3 nodes: %v", err)
	}
}
