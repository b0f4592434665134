package detect

import (
	"path"
	"regexp"
	"strings"

	"go.uber.org/zap"
)

// dcpLayout: PyTorch Distributed Checkpoint (torch.distributed.checkpoint)
// with FileSystemWriter, one folder per step.
//
//   - Steps are folders in the root holding "*.distcp" files or a
//     ".metadata" (or its ".metadata.tmp"), directly or one or two levels
//     down (OLMo's "stepN/model_and_optim/", NeMo 2's "weights/"). The
//     whole name must be a step name ([DCPStepName]): "step-100",
//     "step_100", "step100", "global_step100", "iter_100", "checkpoint-100",
//     "ckpt_100", "epoch_3", "100", NeMo's "...-step=100-..." or
//     Lightning's "epoch=0-step=100.ckpt" (its sharded FSDP and
//     ModelParallel saves are DCP folders with rank 0's meta.pt); or what
//     Options.StepPattern reads from the name. Other folders are skipped
//     with a warning, so a temporary folder ("tmp-4242", mkdtemp's
//     "tmpab12cd9") is never a step whatever digits it carries. NeMo's
//     "...-last" copy of a step is the same step: the two folders are one
//     step with both folders' files.
//   - Marker: ".metadata" in every folder holding "*.distcp" files, which
//     the coordinator writes as ".metadata.tmp" and renames last, after
//     every rank reported its writes done: proof that the file set is
//     final (ProofMarker), once it is newer than every file of its folder
//     (a save into a folder that already holds a .metadata waits for the
//     new one). Read as DCP's record (dcprecord.go), it is also the
//     specification: every file it names must be here at the size its
//     last item ends at, and only those files must be older than it.
//     Files outside the DCP folders leave the proof to the settle window,
//     except in a NeMo step: NeMo's "<name>-unfinished" beside either
//     folder holds the step, and its removal, seen by ferry after every
//     write, proves the folder (nemo.go).
//   - Files: everything in the folder. Ranks by RankOf: "__{R}_{n}.distcp"
//     gives R; ".metadata" is shared.
//   - Pointer: none; DCP has no "latest" convention.
type dcpLayout struct {
	pattern *regexp.Regexp
	warned  map[string]bool
	// nemo is what was seen of NeMo's "-unfinished" markers (nemo.go).
	nemo *nemoSaves
	dcpRecords
}

var (
	dcpStepName = regexp.MustCompile(`(?i)^(?:(?:global_)?step|iter(?:ation)?|checkpoint|ckpt|epoch|batch)?[-_]?(\d+)$`)
	nemoStep    = regexp.MustCompile(`(?:^|[-_])step=(\d+)(?:[-_.]|$)`)
)

// DCPStepName reads the step number from a DCP step folder's name with
// the default rules (see dcpLayout); ok is false for any other name.
func DCPStepName(name string) (int64, bool) {
	if IsTempName(name) {
		return 0, false
	}
	if m := nemoStep.FindStringSubmatch(name); m != nil {
		return parseStep(m[1])
	}
	if m := dcpStepName.FindStringSubmatch(name); m != nil {
		return parseStep(m[1])
	}
	return 0, false
}

const (
	dcpMetadata    = ".metadata"
	dcpMetadataTmp = ".metadata.tmp"
	nemoLast       = "-last"
	// nemoUnfinished: NeMo's ModelCheckpoint (nemo/lightning/pytorch/
	// callbacks/model_checkpoint.py, format_checkpoint_unfinished_marker_path)
	// touches "<checkpoint path without .ckpt and -EMA>-unfinished" beside
	// the checkpoint before saving and removes it when the save is final;
	// NeMo itself deletes checkpoints that still have one.
	nemoUnfinished = "-unfinished"
	nemoEMA        = "-EMA"
	// lightningSuffix ends the folder Lightning's FSDP and ModelParallel
	// strategies save a sharded checkpoint into ("epoch=0-step=100.ckpt").
	lightningSuffix = ".ckpt"
)

func (*dcpLayout) Name() string { return "dcp" }

func (l *dcpLayout) stepFolder(name string) bool {
	_, ok := l.number(name)
	return ok && !IsTempName(name)
}

func (*dcpLayout) Recognize(t *Tree) bool {
	for _, e := range t.Children("") {
		if e.IsDir() && len(dcpFolders(t, e.Path, 2)) > 0 {
			return true
		}
	}
	return false
}

// dcpFolders returns dir and the folders below it, depth levels down at
// most, that hold DCP files.
func dcpFolders(t *Tree, dir string, depth int) []string {
	var out []string
	holds := false
	for _, e := range t.Children(dir) {
		name := e.Name()
		switch {
		case name == dcpMetadata || name == dcpMetadataTmp || strings.HasSuffix(name, ".distcp"):
			holds = true
		case e.IsDir() && depth > 0 && !IsTempName(name):
			out = append(out, dcpFolders(t, e.Path, depth-1)...)
		}
	}
	if holds {
		out = append([]string{dir}, out...)
	}
	return out
}

func (l *dcpLayout) Steps(t *Tree) []Candidate {
	byStep := map[int64][]Candidate{}
	for _, e := range t.Children("") {
		if !e.IsDir() || IsTempName(e.Name()) {
			continue
		}
		folders := dcpFolders(t, e.Path, 2)
		if len(folders) == 0 {
			continue
		}
		n, ok := l.number(e.Name())
		if !ok {
			l.warnOnce(e.Path)
			continue
		}
		byStep[n] = append(byStep[n], l.folder(t, e.Path, n, folders))
	}
	var out []Candidate
	for _, cs := range byStep {
		out = append(out, l.merge(cs)...)
	}
	l.nemo.forget(t)
	return out
}

// folder is the candidate of one step folder holding the DCP folders
// given.
func (l *dcpLayout) folder(t *Tree, root string, n int64, folders []string) Candidate {
	c := folderStep(t, root, n)
	c.Finished, c.Proof = true, provenBy(c, folders)
	if strings.HasSuffix(root, lightningSuffix) {
		// Lightning writes rank 0's meta.pt after dcp.save returns:
		// a marker vouches for the folder only once the settle
		// window shows nothing more is coming.
		c.Proof = ProofNone
	}
	for _, d := range folders {
		l.requireMetadata(t, &c, d)
	}
	l.nemo.apply(t, &c, root, !l.multiNode)
	return c
}

// merge makes the folders claiming one step one candidate where they are
// NeMo's pair, and applies NeMo's rule for the whole step (nemo.go).
func (l *dcpLayout) merge(cs []Candidate) []Candidate {
	roots := make([]string, 0, len(cs))
	nemo := false
	for _, c := range cs {
		roots = append(roots, c.Step.Root)
		nemo = nemo || isNeMoFolder(c.Step.Root)
	}
	out := mergeNeMoLast(cs)
	if nemo && len(out) == 1 {
		l.nemo.keepStep(&out[0], roots)
	}
	return out
}

// requireMetadata applies the marker rule to one folder of DCP files.
func (l *dcpLayout) requireMetadata(t *Tree, c *Candidate, dir string) {
	m, ok := t.Get(dir + "/" + dcpMetadata)
	if !ok || !m.IsRegular() {
		if c.Finished {
			c.Finished, c.Waiting = false, "no "+dir+"/"+dcpMetadata
		}
		return
	}
	if rec, ok := l.record(t, m); ok {
		requireFresh(t, c, m.Path, recordedUnder(dir, rec))
		l.requireRecorded(t, c, dir, m, rec)
		return
	}
	under := dir + "/"
	requireFresh(t, c, m.Path, func(f File) bool { return strings.HasPrefix(f.RelPath, under) })
	requireSettledFolder(t, c, dir, m)
}

// provenBy says what the .metadata files prove about a step: the whole
// file set when every file lies in a DCP folder (each then has its
// marker, checked by requireMetadata); the settle window when files lie
// elsewhere in the step (NeMo 2's context/ beside weights/, OLMo's train
// state beside model_and_optim/), which no marker vouches for and which
// the trainer may write after the last .metadata (NeMo's own marker may
// prove such a step: nemo.go).
func provenBy(c Candidate, folders []string) Proof {
	in := make(map[string]bool, len(folders))
	for _, d := range folders {
		in[d] = true
	}
	for _, f := range c.Step.Files {
		if !in[path.Dir(f.RelPath)] {
			return ProofNone
		}
	}
	return ProofMarker
}

func (l *dcpLayout) number(name string) (int64, bool) {
	if l.pattern != nil {
		return stepFromName(l.pattern, name)
	}
	return DCPStepName(name)
}

func (l *dcpLayout) warnOnce(dir string) {
	if l.warned == nil {
		l.warned = map[string]bool{}
	}
	if !l.warned[dir] {
		l.warned[dir] = true
		l.log.Warn("DCP folder whose name is not a step name skipped (temporary folders never are; for other names set --step-pattern)", zap.String("folder", dir))
	}
}

// stepFromName applies a step pattern to a name: the first group if the
// pattern has one, else the whole match, must be decimal digits.
func stepFromName(re *regexp.Regexp, name string) (int64, bool) {
	m := re.FindStringSubmatch(name)
	if m == nil {
		return 0, false
	}
	digits := m[0]
	if len(m) > 1 {
		digits = m[1]
	}
	return parseStep(digits)
}
