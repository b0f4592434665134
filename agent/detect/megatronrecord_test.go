package detect

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// megatronTree writes a Megatron legacy iteration 100 with a folder per
// name, each holding model_optim_rng.pt, and a tracker naming it, written
// a second after the files (rank 0, after the barrier).
func megatronTree(t *testing.T, folders ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, f := range folders {
		write(t, dir, "iter_0000100/"+f+"/"+megatronModelFile, "PK weights of "+f)
	}
	age(t, dir)
	write(t, dir, megatronTracker, "100")
	setTime(t, filepath.Join(dir, megatronTracker), time.Now().Add(-time.Hour+time.Second))
	return dir
}

// TestMegatronTrackerImpliesFolders: a fresh tracker vouches for every
// rank's folder; a folder without its model_optim_rng.pt, or a gap in the
// rank indexes, holds the step, and the reason names what is missing.
// Before, the tracker alone completed such a step.
func TestMegatronTrackerImpliesFolders(t *testing.T) {
	grid := []string{"mp_rank_00_000", "mp_rank_00_001", "mp_rank_01_000", "mp_rank_01_001"}
	cases := []struct {
		name    string
		folders []string
		remove  string // a path below iter_0000100
		held    string
	}{
		{name: "tp2 pp2", folders: grid},
		{name: "tp4", folders: []string{"mp_rank_00", "mp_rank_01", "mp_rank_02", "mp_rank_03"}},
		{name: "model file missing", folders: grid, remove: "mp_rank_01_000/" + megatronModelFile,
			held: "record: iter_0000100/mp_rank_01_000/model_optim_rng.pt is not here (expected: present, of any size, as the tracker records no sizes; found: nothing): latest_checkpointed_iteration.txt names iteration 100"},
		{name: "tensor rank folder missing", folders: []string{"mp_rank_00", "mp_rank_01", "mp_rank_02", "mp_rank_03"}, remove: "mp_rank_02",
			held: "record: iter_0000100: no rank folder with index 2 in position 1 of mp_rank_* (expected: every index from 0 to 3, as mp_rank_03 exists; found: none with 2)"},
		{name: "pipeline stage missing", folders: []string{"mp_rank_00_001", "mp_rank_01_001", "mp_rank_00_002", "mp_rank_01_002"},
			held: "no rank folder with index 0 in position 2 of mp_rank_*"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := megatronTree(t, tc.folders...)
			if tc.remove != "" {
				if err := os.RemoveAll(filepath.Join(dir, "iter_0000100", tc.remove)); err != nil {
					t.Fatal(err)
				}
				age(t, filepath.Join(dir, "iter_0000100"))
			}
			c := candidates(t, Options{Dir: dir, Layout: "megatron"})[100]
			if !c.Finished {
				t.Fatalf("fresh tracker: not finished (%s)", c.Waiting)
			}
			if tc.held == "" && c.Held != "" || !strings.Contains(c.Held, tc.held) {
				t.Fatalf("held %q, want %q", c.Held, tc.held)
			}
			// On a node of a multi-node job the folders may be other nodes'.
			if c := candidates(t, Options{Dir: dir, Layout: "megatron", Nodes: 2})[100]; c.Held != "" {
				t.Errorf("multi-node: held %q", c.Held)
			}
		})
	}
}

// TestMegatronTorchDistRecord: a torch_dist iteration's .metadata is
// DCP's record: its expectations travel with the step, and a shard of
// another size (its time put back, so no timing rule sees it) keeps the
// step from completing under a fresh tracker, with the file and both
// sizes named. metadata.json, written after .metadata, is not stale.
func TestMegatronTorchDistRecord(t *testing.T) {
	dir := t.TempDir()
	copyRecord(t, "world4-threads2", dir, "iter_0000100")
	write(t, dir, "iter_0000100/metadata.json", `{"sharded_backend": "torch_dist"}`)
	setTime(t, filepath.Join(dir, "iter_0000100", "metadata.json"), time.Now().Add(-time.Hour+2*time.Second))
	write(t, dir, megatronTracker, "100")
	setTime(t, filepath.Join(dir, megatronTracker), time.Now().Add(-time.Hour+3*time.Second))
	c := candidates(t, Options{Dir: dir, Layout: "megatron"})[100]
	if !c.Finished || expectOf(c)["iter_0000100/__2_0.distcp"] != 2556 {
		t.Fatalf("whole torch_dist save: finished %v (%s), expect %v", c.Finished, c.Waiting, expectOf(c))
	}
	shard := filepath.Join(dir, "iter_0000100", "__2_0.distcp")
	st, _ := os.Stat(shard)
	if err := os.Truncate(shard, 1278); err != nil {
		t.Fatal(err)
	}
	setTime(t, shard, st.ModTime())
	c = candidates(t, Options{Dir: dir, Layout: "megatron"})[100]
	want := "record: iter_0000100/__2_0.distcp is 1278 bytes, iter_0000100/.metadata records 2556"
	if c.Finished || !c.Disagrees || !strings.Contains(c.Waiting, want) {
		t.Fatalf("torn shard: finished %v disagrees %v, waiting %q; want %q", c.Finished, c.Disagrees, c.Waiting, want)
	}
}
