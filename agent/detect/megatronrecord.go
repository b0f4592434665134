package detect

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// The Megatron record. Facts from Megatron-LM core_v0.19.0,
// megatron/training/checkpointing.py:
//
//   - save_checkpoint has every rank save its part, then (synchronous
//     saves) meet at torch.distributed.barrier(), and only then does
//     global rank 0 alone run iter_finalize_fn, which opens
//     latest_checkpointed_iteration.txt with 'w' and writes
//     str(iteration) (or "release"), no newline. Asynchronous saves
//     (torch_dist, torch_dcp) add iter_finalize_fn to the request's
//     finalize_fns, run by maybe_finalize_async_calls once
//     is_current_async_call_done has all-reduced that every rank's writes
//     are done (dist_checkpointing/strategies/async_utils.py). So a
//     tracker written while ferry watches vouches for every rank's files
//     of that iteration, and for nothing written since.
//   - Legacy format: the ranks with data-parallel rank 0 (or expert
//     data-parallel rank 0) torch.save "iter_{N:07d}/mp_rank_{tp:02d}
//     [_{pp:03d}][_{ep:03d}]/model_optim_rng.pt" (get_checkpoint_name; a
//     pipeline index when the pipeline world size is above 1, an expert
//     index when the expert world size is), the distributed optimizer
//     its "distrib_optim.pt" beside it. Every folder is made for a rank
//     that writes model_optim_rng.pt into it, or by a rank of the same
//     (tp, pp, ep) shard (ensure_directory_exists for distrib_optim.pt
//     runs on every rank; the comment above the writers says the union
//     covers every (tp_rank, ep_rank) shard). And every tensor-,
//     pipeline- and expert-parallel index from 0 up has a writer. So,
//     once the tracker names the iteration: each mp_rank folder holds
//     model_optim_rng.pt, and the indexes seen at each position run from
//     0 without a gap.
//   - torch_dist: dist_checkpointing.save (core/dist_checkpointing/
//     serialization.py) writes the DCP files and .metadata of the folder,
//     then metadata.json (metadata_finalize_fn), before the tracker: the
//     folder's .metadata is DCP's record, checked as the dcp layout
//     checks it (sizes included).
//
// What the tracker does not prove: the world sizes. It holds the
// iteration alone, and the folder names do not give the highest rank: a
// tensor-parallel degree of 4 with mp_rank_03 missing altogether looks
// like a degree of 3. The args in model_optim_rng.pt record them; ferry
// does not read them. Nor does it record sizes: a legacy file is checked
// for presence and, as every torch.save file, for its zip end record.

var megatronRankDir = regexp.MustCompile(`^mp_rank_(\d+)((?:_\d+)*)$`)

const megatronModelFile = "model_optim_rng.pt"

// requireRankFolders holds c while its legacy rank folders disagree with
// what a fresh tracker implies.
func requireRankFolders(t *Tree, c *Candidate, root string, multiNode bool) {
	if !c.Finished || c.Held != "" || multiNode {
		return
	}
	var idx [][]int // the indexes of each folder, by position
	var names []string
	for _, e := range t.Children(root) {
		m := megatronRankDir.FindStringSubmatch(e.Name())
		if m == nil || !e.IsDir() {
			continue
		}
		if f, ok := t.Get(e.Path + "/" + megatronModelFile); !ok || !f.IsRegular() {
			c.Held = fmt.Sprintf("record: %s/%s is not here (expected: present, of any size, as the tracker records no sizes; found: nothing): %s names iteration %d, written by rank 0 after every rank saved its folder",
				e.Path, megatronModelFile, megatronTracker, c.Step.Number)
			return
		}
		var ix []int
		for _, s := range append([]string{m[1]}, strings.Split(strings.TrimPrefix(m[2], "_"), "_")...) {
			if s == "" {
				continue
			}
			n, err := strconv.Atoi(s)
			if err != nil {
				return
			}
			ix = append(ix, n)
		}
		idx, names = append(idx, ix), append(names, e.Name())
	}
	if why := indexGap(idx, names); why != "" {
		c.Held = fmt.Sprintf("record: %s: %s; %s names iteration %d, written by rank 0 after every rank saved its folder",
			root, why, megatronTracker, c.Step.Number)
	}
}

// indexGap returns the first index missing at some position of the
// folders' indexes (each position must run from 0 to its highest value),
// or "". Folders with different numbers of indexes claim nothing.
func indexGap(idx [][]int, names []string) string {
	if len(idx) == 0 {
		return ""
	}
	width := len(idx[0])
	for _, ix := range idx {
		if len(ix) != width {
			return ""
		}
	}
	for pos := range width {
		seen := map[int]bool{}
		top, topName := -1, ""
		for i, ix := range idx {
			seen[ix[pos]] = true
			if ix[pos] > top {
				top, topName = ix[pos], names[i]
			}
		}
		var missing []int
		for v := range top {
			if !seen[v] {
				missing = append(missing, v)
			}
		}
		if len(missing) > 0 {
			sort.Ints(missing)
			return fmt.Sprintf("no rank folder with index %d in position %d of mp_rank_* (expected: every index from 0 to %d, as %s exists; found: none with %d)",
				missing[0], pos+1, top, topName, missing[0])
		}
	}
	return ""
}

// requireTorchDist applies DCP's record to a torch_dist iteration folder
// that has a .metadata. The tracker, written after metadata.json,
// vouches for every file, so the record's sizes are checked but files it
// does not name (common.pt, metadata.json) do not lower the proof.
func (l *megatronLayout) requireTorchDist(t *Tree, c *Candidate, root string) {
	m, ok := t.Get(root + "/" + dcpMetadata)
	if !ok || !m.IsRegular() {
		return
	}
	if rec, ok := l.rec.record(t, m); ok {
		l.rec.checkRecorded(t, c, root, m, rec)
	}
}
