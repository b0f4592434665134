package detect

import "regexp"

// deepspeedLayout: DeepSpeed's save_checkpoint(save_dir) with the default
// tag.
//
//   - Steps are folders "global_step{N}" in the root; N is the step.
//   - Marker: the root's "latest" file, which rank 0 rewrites in place with
//     the tag (no newline) after its own save, possibly before other ranks'
//     ZeRO files are done: the settle window covers files being written,
//     and Options.ExpectedRanks a rank that has not begun. A step is
//     finished when latest names it or a later step (a step saved while the
//     agent was down is still uploaded).
//   - Files: everything in the folder. Ranks by RankOf (ZeRO shards
//     "zero_pp_rank_{D}_mp_rank_00_*" give D; "mp_rank_{M}_model_states.pt"
//     is read by every rank and has none).
//   - Pointer: Generated "latest" holding the folder name, as DeepSpeed
//     writes it, so a restore resumes at this step. The live latest file and
//     the zero_to_fp32.py script DeepSpeed copies next to it are not part of
//     any step.
type deepspeedLayout struct{}

var deepspeedDir = regexp.MustCompile(`^global_step(\d+)$`)

const deepspeedLatest = "latest"

func (deepspeedLayout) Name() string { return "deepspeed" }

func (deepspeedLayout) Recognize(t *Tree) bool {
	if len(numberedDirs(t, deepspeedDir)) > 0 {
		return true
	}
	_, ok := pointerStep(t, deepspeedLatest, deepspeedDir)
	return ok
}

func (deepspeedLayout) Steps(t *Tree) []Candidate {
	latest, haveLatest := pointerStep(t, deepspeedLatest, deepspeedDir)
	var out []Candidate
	for n, root := range numberedDirs(t, deepspeedDir) {
		c := folderStep(t, root, n)
		c.Finished = haveLatest && latest >= n
		if !c.Finished {
			c.Waiting = "latest does not name " + root + " or a later tag"
		}
		c.Step.Generated = []Generated{{RelPath: deepspeedLatest, Data: []byte(root)}}
		out = append(out, c)
	}
	return out
}
