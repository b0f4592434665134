package detect

import (
	"regexp"
	"strings"
)

// Nested DeepSpeed saves. Lightning's DeepSpeedStrategy (lightning
// 2.4..2.6.5, src/lightning/pytorch/strategies/deepspeed.py
// DeepSpeedStrategy.save_checkpoint) saves each checkpoint as a folder
// that ModelCheckpoint names ("epoch=0-step=100.ckpt") and that
// DeepSpeed's engine.save_checkpoint(save_dir=<folder>, tag="checkpoint")
// fills with its own layout: <folder>/checkpoint/ holds the model and
// ZeRO optimizer states, <folder>/zero_to_fp32.py and <folder>/latest
// (the tag, "checkpoint") lie beside it
// (testdata/saveorders/lightning-deepspeed.trace). So the deepspeed
// layout also reads a folder in the root that holds a latest file as a
// step of its own:
//
//   - the step is read from the folder's name: Options.StepPattern when
//     set, else ModelCheckpoint's "step=N"; a folder neither gives is
//     not a step;
//   - marker: the folder's own latest, naming a folder inside it (the
//     tag), and newer than the files it vouches for (latestCovers: rank
//     0's, written before it; other ranks may still be writing, since
//     DeepSpeed meets them at its barrier only after latest);
//   - held, as a global_step folder, while a rank has ZeRO model states
//     but no optimizer states (zeroHeld), or while a file rank 0's model
//     states record implies is missing from the tag folder (dsrecord.go);
//     with Options.ExpectedRanks the writers of the optimizer files
//     prove the set (ProofRanks);
//   - files: everything in the folder, latest included: restoring the
//     folder gives the tree DeepSpeed loads, so nothing is generated.

// lightningStep reads the step from ModelCheckpoint's default names
// ("{epoch}-{step}" formatted as "epoch=E-step=S").
var lightningStep = regexp.MustCompile(`(?:^|[^A-Za-z0-9_])step=(\d+)`)

// nestedNumber returns the step a nested save's folder name gives.
func (l *deepspeedLayout) nestedNumber(name string) (int64, bool) {
	re := lightningStep
	if l.pattern != nil {
		re = l.pattern
	}
	m := re.FindStringSubmatch(name)
	switch {
	case m == nil:
		return 0, false
	case len(m) > 1:
		return parseStep(m[1])
	}
	return parseStep(m[0])
}

// nestedDirs returns the folders of the root that hold a nested save (a
// latest file, or, before it, a name giving a step), by step.
func (l *deepspeedLayout) nestedDirs(t *Tree) map[int64]string {
	out := map[int64]string{}
	t.eachChild("", func(e *Entry) {
		if !e.IsDir() || deepspeedDir.MatchString(e.Name()) {
			return
		}
		if n, ok := l.nestedNumber(e.Name()); ok {
			out[n] = e.Path
		}
	})
	return out
}

// recognizeNested reports whether a folder of the root holds a latest
// file naming a folder beside it: DeepSpeed's layout one level down.
func recognizeNested(t *Tree) bool {
	found := false
	t.eachChild("", func(e *Entry) {
		if e.IsDir() && !found {
			_, found = nestedTag(t, e.Path)
		}
	})
	return found
}

// nestedTag returns the folder root/latest names, when it is a folder of
// root.
func nestedTag(t *Tree, root string) (string, bool) {
	data, err := t.ReadSmall(root + "/" + deepspeedLatest)
	if err != nil {
		return "", false
	}
	tag := strings.TrimSpace(string(data))
	if tag == "" || strings.ContainsAny(tag, "/\\") || tag == "." || tag == ".." {
		return "", false
	}
	e, ok := t.Get(root + "/" + tag)
	return tag, ok && e.IsDir()
}

// nestedSteps returns the nested saves as candidates.
func (l *deepspeedLayout) nestedSteps(t *Tree) []Candidate {
	var out []Candidate
	for n, root := range l.nestedDirs(t) {
		c := folderStep(t, root, n)
		tag, ok := nestedTag(t, root)
		c.Finished = ok
		if !ok {
			c.Waiting = root + "/" + deepspeedLatest + " does not name a folder of " + root + " yet"
		}
		requireFresh(t, &c, root+"/"+deepspeedLatest, latestCovers)
		c.Held, c.Proof = zeroHeld(&c), deepspeedProof(&c)
		if ok {
			l.requireImplied(t, &c, root+"/"+tag)
		}
		out = append(out, c)
	}
	return out
}
