package detect

import (
	"regexp"
	"strconv"
)

// megatronLayout: Megatron-LM (and Megatron-Core) checkpoints.
//
//   - Steps are folders "iter_{NNNNNNN}" (seven or more digits) in the root;
//     the number is the iteration.
//   - Marker: "latest_checkpointed_iteration.txt" in the root, which rank 0
//     writes after the save with the iteration number. A step is finished
//     when the tracker names it or a later iteration. A tracker holding
//     "release" names no step.
//   - Files: everything in the folder, both the legacy format
//     ("mp_rank_{TT}[_{PPP}]/model_optim_rng.pt", "distrib_optim.pt") and
//     torch_dist ("__{R}_{n}.distcp", ".metadata", "common.pt",
//     "metadata.json"). Ranks by RankOf: "mp_rank_{TT}" folders give the
//     tensor-parallel rank, distcp files the writer's rank.
//   - Pointer: Generated tracker file holding the iteration in decimal
//     without a newline, as Megatron writes it.
type megatronLayout struct{}

var (
	megatronDir     = regexp.MustCompile(`^iter_(\d{7,})$`)
	megatronTracked = regexp.MustCompile(`^(\d+)$`)
)

const megatronTracker = "latest_checkpointed_iteration.txt"

func (megatronLayout) Name() string { return "megatron" }

func (megatronLayout) Recognize(t *Tree) bool {
	if len(numberedDirs(t, megatronDir)) > 0 {
		return true
	}
	_, ok := t.Get(megatronTracker)
	return ok
}

func (megatronLayout) Steps(t *Tree) []Candidate {
	latest, haveLatest := pointerStep(t, megatronTracker, megatronTracked)
	var out []Candidate
	for n, root := range numberedDirs(t, megatronDir) {
		c := folderStep(t, root, n)
		c.Finished = haveLatest && latest >= n
		if !c.Finished {
			c.Waiting = megatronTracker + " does not name iteration " + strconv.FormatInt(n, 10) + " or later"
		}
		c.Step.Generated = []Generated{{RelPath: megatronTracker, Data: []byte(strconv.FormatInt(n, 10))}}
		out = append(out, c)
	}
	return out
}
