package detect

import (
	"path"

	"go.uber.org/zap"
	"regexp"
	"strconv"
)

// hfLayout: the Hugging Face Trainer's output_dir.
//
//   - Steps are folders "checkpoint-{N}" in the root; N is the global step.
//     ("tmp-checkpoint-{N}", used by some versions while saving, is a
//     temporary name and never a step.)
//   - Marker: "trainer_state.json" in the folder, which the main process
//     writes after the model, optimizer, scheduler and (from transformers
//     4.36) RNG state; it vouches for them only when newer than each. RNG
//     states are never covered: up to 4.35 every process writes its own
//     after the marker, and other ranks' may come after it in any version. On other nodes of a multi-node job saving to local disks it
//     never appears: see Options.NoMarker.
//   - Ranks: each process writes "rng_state_{R}.pth" ("rng_state.pth"
//     alone) after its model and optimizer shards, and another rank's can
//     land after trainer_state.json. Options.ExpectedRanks counts these RNG
//     states, and with it the marker and that many RNG states prove the
//     file set (ProofRanks). A step without RNG states (save_only_model)
//     counts its shards' writers and only the settle window decides.
//   - Files: everything in the folder, including nested DeepSpeed
//     ("global_step{N}/...") or FSDP ("pytorch_model_fsdp_0/__R_0.distcp")
//     shards. Ranks by RankOf ("rng_state_{R}.pth", shards).
//   - Pointer: none. The Trainer resumes from the highest-numbered
//     checkpoint folder; DeepSpeed's own "latest" inside the folder is part
//     of it and only ever names that folder's tag.
type hfLayout struct {
	log     *zap.Logger
	indexes recordCache[indexRead] // hfindex.go
	// warnedRoot holds the root files already warned about.
	warnedRoot map[string]bool
}

var hfDir = regexp.MustCompile(`^checkpoint-(\d+)$`)

const hfMarker = "trainer_state.json"

func (hfLayout) Name() string { return "hf" }

func (hfLayout) stepFolder(name string) bool { return hfDir.MatchString(name) }

func (hfLayout) Recognize(t *Tree) bool { return len(numberedDirs(t, hfDir)) > 0 }

func (l *hfLayout) Steps(t *Tree) []Candidate {
	var out []Candidate
	for n, root := range numberedDirs(t, hfDir) {
		c := folderStep(t, root, n)
		if e, ok := t.Get(root + "/" + hfMarker); ok && e.IsRegular() {
			c.Finished = true
		} else {
			c.Waiting = "no " + hfMarker
		}
		requireFresh(t, &c, root+"/"+hfMarker, hfCovered)
		l.requireIndexed(t, &c, root)
		c.Ranks, c.Proof = hfRanks(&c)
		out = append(out, c)
	}
	l.warnRootFiles(t)
	return out
}

// warnRootFiles warns, once per name, about files in the watch dir's root:
// they belong to no checkpoint-N step and are never uploaded. The
// Trainer's final save_model() (model weights, config, tokenizer) writes
// there when output_dir is the watched folder.
func (l *hfLayout) warnRootFiles(t *Tree) {
	if l.log == nil {
		return
	}
	for _, e := range t.Children("") {
		if !e.IsRegular() || IsTempName(e.Name()) || l.warnedRoot[e.Name()] {
			continue
		}
		if l.warnedRoot == nil {
			l.warnedRoot = map[string]bool{}
		}
		l.warnedRoot[e.Name()] = true
		l.log.Warn("a file in the watch dir's root belongs to no checkpoint-N step and is not uploaded (the Trainer's final save_model() writes there): push the final model with `ferry push --step N DIR`, or save it into a checkpoint-N folder",
			zap.String("file", e.Path))
	}
}

// hfCovered reports whether trainer_state.json vouches for a file: every
// file but the RNG states. Another rank's may land after it in any
// version, and up to transformers 4.35 Trainer._save_checkpoint saves
// trainer_state.json before the RNG state of every process, rank 0's
// "rng_state.pth" included (from 4.36 the RNG state comes first); the RNG
// states count as ranks instead (hfRanks), and the settle window or
// --expected-ranks decides.
func hfCovered(f File) bool {
	base := path.Base(f.RelPath)
	return base != "rng_state.pth" && !rankRNG.MatchString(base)
}

// hfRanks returns the ranks whose RNG state is in a Hugging Face step,
// and the proof they give; nil and ProofNone when it has none.
func hfRanks(c *Candidate) ([]string, Proof) {
	var ranks []string
	for _, f := range c.Step.Files {
		base := path.Base(f.RelPath)
		if base == "rng_state.pth" {
			ranks = append(ranks, "rank 0")
		} else if m := rankRNG.FindStringSubmatch(base); m != nil {
			n, _ := strconv.Atoi(m[1])
			ranks = append(ranks, "rank "+strconv.Itoa(n))
		}
	}
	if ranks == nil {
		return nil, ProofNone
	}
	return ranks, ProofRanks
}
