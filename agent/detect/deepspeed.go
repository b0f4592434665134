package detect

import (
	"regexp"
	"sort"
	"strings"

	"go.uber.org/zap"
)

// deepspeedLayout: DeepSpeed's save_checkpoint(save_dir) with the default
// tag.
//
//   - Steps are folders "global_step{N}" in the root; N is the step.
//     Lightning's DeepSpeedStrategy nests this layout one level down, a
//     step per folder (dsnested.go).
//   - Marker: the root's "latest" file, which rank 0 rewrites in place with
//     the tag (no newline) after its own save, possibly before other ranks'
//     ZeRO files are done. A step is finished when latest names it or a
//     later step (a step saved while the agent was down is still
//     uploaded), and latest is newer than rank 0's files of the step
//     (a step saved again after a rollback waits for latest to be
//     rewritten). Each rank writes its model states, then its optimizer
//     states: while a rank has "zero_pp_rank_D_mp_rank_M_model_states.pt"
//     but not its "..._optim_states.pt" in a step that has optimizer
//     states, the step is held. The marker, that rule and
//     Options.ExpectedRanks writers prove the file set (ProofRanks);
//     without ExpectedRanks a rank that has not begun is invisible, and
//     the settle window decides.
//   - Record: rank 0's model states file records dp_world_size and
//     mp_world_size, from which the model and optimizer files of every
//     rank follow; while one is missing the step is held (dsrecord.go).
//   - Files: everything in the folder. Ranks by RankOf (ZeRO shards
//     "zero_pp_rank_{D}_mp_rank_00_*" give D; "mp_rank_{M}_model_states.pt"
//     is read by every rank and has none).
//   - Pointer: Generated "latest" holding the folder name, as DeepSpeed
//     writes it, so a restore resumes at this step. The live latest file and
//     the zero_to_fp32.py script DeepSpeed copies next to it are not part of
//     any step.
type deepspeedLayout struct {
	log *zap.Logger
	// multiNode: the job has several nodes, so the files the record
	// implies may be other nodes' (dsrecord.go).
	multiNode bool
	records   recordCache[dsRead]
	// pattern is Options.StepPattern: it reads the step of a nested
	// save's folder (dsnested.go).
	pattern *regexp.Regexp
}

var deepspeedDir = regexp.MustCompile(`^global_step(\d+)$`)

const deepspeedLatest = "latest"

func (*deepspeedLayout) Name() string { return "deepspeed" }

func (*deepspeedLayout) stepFolder(name string) bool { return deepspeedDir.MatchString(name) }

func (*deepspeedLayout) Recognize(t *Tree) bool {
	if len(numberedDirs(t, deepspeedDir)) > 0 || recognizeNested(t) {
		return true
	}
	_, ok := pointerStep(t, deepspeedLatest, deepspeedDir)
	return ok
}

func (l *deepspeedLayout) Steps(t *Tree) []Candidate {
	latest, haveLatest := pointerStep(t, deepspeedLatest, deepspeedDir)
	var out []Candidate
	for n, root := range numberedDirs(t, deepspeedDir) {
		c := folderStep(t, root, n)
		c.Finished = haveLatest && latest >= n
		if !c.Finished {
			c.Waiting = "latest does not name " + root + " or a later tag"
		}
		requireFresh(t, &c, deepspeedLatest, latestCovers)
		c.Moved = haveLatest && latest > n
		c.Held, c.Proof = zeroHeld(&c), deepspeedProof(&c)
		l.requireImplied(t, &c, root)
		c.Step.Generated = []Generated{{RelPath: deepspeedLatest, Data: []byte(root)}}
		out = append(out, c)
	}
	return append(out, l.nestedSteps(t)...)
}

func (*deepspeedLayout) pointer() (string, func([]byte) (int64, bool)) {
	return deepspeedLatest, func(b []byte) (int64, bool) {
		m := deepspeedDir.FindStringSubmatch(strings.TrimSpace(string(b)))
		if m == nil {
			return 0, false
		}
		return parseStep(m[1])
	}
}

var modelStates = regexp.MustCompile(`(?:^|/)mp_rank_(\d+)_model_states\.pt$`)

// pipeLayer matches the layer files of DeepSpeed's pipeline parallelism:
// each stage writes its own layers ("layer_{idx:02d}[-{rank_repr}]-model_
// states.pt", deepspeed/runtime/pipe/module.py PipelineModule.
// ckpt_layer_path and save_state_dict), while rank 0 writes latest after
// its own stage's, not the last stage's.
var pipeLayer = regexp.MustCompile(`(?:^|/)layer_\d+(?:-[^/]*)?-model_states\.pt$`)

// latestCovers reports whether rank 0's latest file vouches for a file:
// rank 0 writes latest after its own files, while other ranks may still
// write theirs, so it covers the files of data-parallel rank 0 of model
// rank 0 and files no rank's name is on, except pipeline layer files,
// which any stage writes (their names carry no stage).
func latestCovers(f File) bool {
	if pipeLayer.MatchString(f.RelPath) {
		return false
	}
	if m := rankZero.FindStringSubmatch(f.RelPath); m != nil {
		return m[1] == "0" && strings.TrimLeft(m[2], "0") == ""
	}
	if m := modelStates.FindStringSubmatch(f.RelPath); m != nil {
		return strings.TrimLeft(m[1], "0") == ""
	}
	return true
}

// deepspeedProof is ProofRanks, but the settle window for a step with
// pipeline layer files: no name says which stage wrote them, so no count
// of writers proves the last stage done.
func deepspeedProof(c *Candidate) Proof {
	for _, f := range c.Step.Files {
		if pipeLayer.MatchString(f.RelPath) {
			return ProofNone
		}
	}
	return ProofRanks
}

var zeroKind = regexp.MustCompile(`zero_pp_rank_(\d+)_mp_rank_(\d+)_(model|optim)_states\.pt$`)

// zeroHeld names the writers of a DeepSpeed step that have written their
// ZeRO model states but not yet their optimizer states, when the step has
// optimizer states at all (a save without them has none for any rank).
func zeroHeld(c *Candidate) string {
	model, optim := map[string]bool{}, map[string]bool{}
	for _, f := range c.Step.Files {
		m := zeroKind.FindStringSubmatch(f.RelPath)
		if m == nil {
			continue
		}
		key := "zero_pp_rank_" + m[1] + "_mp_rank_" + m[2]
		if m[3] == "model" {
			model[key] = true
		} else {
			optim[key] = true
		}
	}
	if len(optim) == 0 {
		return ""
	}
	var missing []string
	for k := range model {
		if !optim[k] {
			missing = append(missing, k)
		}
	}
	if len(missing) == 0 {
		return ""
	}
	sort.Strings(missing)
	return "optimizer states not written yet for " + strings.Join(missing, ", ")
}
