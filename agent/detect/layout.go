package detect

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/ferrylabs/ferry/manifest"
)

// Layout maps a checkpoint directory tree to candidate steps, following one
// framework's naming and markers. A Layout is used from one goroutine at a
// time.
type Layout interface {
	// Name is the value of --layout that selects this layout.
	Name() string
	// Recognize reports whether the tree holds something only this layout
	// writes; the auto layout uses it to choose.
	Recognize(t *Tree) bool
	// Steps returns the candidate steps of the tree in any order, finished
	// or not. Candidates with the same ID are ambiguous and skipped.
	Steps(t *Tree) []Candidate
}

// Candidate is a step as a layout sees it, before the watcher decides
// whether it is complete.
type Candidate struct {
	// ID identifies the candidate across evaluations; empty means the step
	// number. The flat layout without a step pattern uses the entry's name
	// and leaves Step.Number at -1 for the watcher to assign.
	ID string
	// Step holds the number, root, files (with ranks), the symlinks the
	// layout attributes to the step (targets as stored; the watcher checks
	// and rewrites them) and generated pointer files.
	Step Step
	// Finished reports whether the framework's marker declares the step
	// written; layouts without a marker set it always.
	Finished bool
	// Waiting says what the marker still lacks, for debug logs.
	Waiting string
	// Held, when set, says what in the tree shows the step is not
	// complete yet whatever the marker says (a rank with model states but
	// no optimizer states, a rank whose pointer names an older step).
	Held string
	// Proof says what the layout's evidence proves about the step's file
	// set once the marker holds; it decides whether close-write detection
	// may shorten the settle window (see proof.go).
	Proof Proof
	// Ranks, when not nil, are the ranks whose part of the step is known
	// written (an HF rank's RNG state, a Composer rank whose link names
	// this batch), counted against Options.ExpectedRanks instead of the
	// writers the file names give.
	Ranks []string
	// Stale is set when the layout's marker exists but is older than
	// bytes it vouches for (proof.go): the step waits for a fresh one.
	Stale bool
	// Disagrees is set when a fresh record names a file of another size
	// than it records (dcprecord.go): the save the trainer declared is
	// not the bytes on disk. A file it names that is missing (a cleanup,
	// another node's) is not this.
	Disagrees bool
	// Moved is set when the marker is a pointer in the root (DeepSpeed's
	// latest, Megatron's tracker) that names a later step now: it says
	// the step was complete once, not that its files are still that
	// version (declare.go).
	Moved bool
	// PointedBack is set when Held says only that pointers name an
	// earlier step (Composer's latest-rank links, repointed by a
	// rolled-back run): a step the pointers declared complete before,
	// with the same files, stays complete (declare.go).
	PointedBack bool
	// Linked is set when Composer's latest-rank links vouch for the step
	// beside its marker (a sharded folder of a linked save folder): the
	// watcher keeps a folder it saw linked after its last write complete
	// while the links are gone or name an earlier batch, and holds one it
	// saw written whose links lagged behind it after its marker and never
	// named it (folderLinked).
	Linked bool
	// ByTrainer is set when the trainer declared the step complete
	// (Watcher.Declare): only its files' closes, temporary names and
	// formats still count.
	ByTrainer bool
	// Cut, when set, says why the step is not the one its framework
	// finished any more: a folder of it removed since, or being removed
	// (NeMo's rotation, nemo.go). It holds the step as a declared file
	// deleted does (declare.go): never committed, and reported Lost
	// should the rest go before it was reported.
	Cut string
	// Covers, when set, says which files the marker vouches for (nil:
	// every file); set with Step.Marker.
	Covers func(File) bool
	// Temps are paths with temporary names inside the step: while any
	// exists the step is not complete.
	Temps []string
	// Errs are problems with the step's entries (unlistable folders,
	// unreadable links).
	Errs []error
}

func (c *Candidate) id() string {
	if c.ID != "" {
		return c.ID
	}
	return strconv.FormatInt(c.Step.Number, 10)
}

// LayoutNames returns the accepted values of Options.Layout.
func LayoutNames() []string {
	return []string{"auto", "composer", "dcp", "deepspeed", "megatron", "hf", "single", "flat"}
}

// newLayout builds the layout opts names; the dcp layout records NeMo's
// markers in nemo. The auto layout tries the
// specific layouts in an order where a more specific one comes before a
// more general one that would also match (Composer's and Megatron's
// sharded folders also look like DCP folders; any checkpoint file in the
// root looks like the single layout, tried last).
func newLayout(opts *Options, linked *atomic.Bool, nemo *nemoSaves) (Layout, error) {
	pattern, err := compileStepPattern(opts.StepPattern)
	if err != nil {
		return nil, err
	}
	log := opts.Logger
	specific := func() []Layout {
		return []Layout{&composerLayout{rec: dcpRecords{log: log, multiNode: opts.Nodes > 1}, linked: linked}, &deepspeedLayout{log: log, multiNode: opts.Nodes > 1, pattern: pattern}, &megatronLayout{rec: dcpRecords{log: log, multiNode: opts.Nodes > 1}}, &hfLayout{log: log}, &dcpLayout{pattern: pattern, nemo: nemo, dcpRecords: dcpRecords{log: log, multiNode: opts.Nodes > 1}}, &singleLayout{log: log}}
	}
	switch opts.Layout {
	case "auto":
		return &autoLayout{layouts: specific(), log: log}, nil
	case "flat":
		return &flatLayout{pattern: pattern, log: log}, nil
	}
	for _, l := range specific() {
		if l.Name() == opts.Layout {
			return l, nil
		}
	}
	return nil, fmt.Errorf("detect: unknown layout %q (want one of %s)", opts.Layout, strings.Join(LayoutNames(), ", "))
}

// autoLayout picks the first layout that recognises the tree, logs which,
// and keeps it. Until then it finds no steps. It never picks flat, which
// would match anything, including a half-created first step of another
// layout.
type autoLayout struct {
	layouts []Layout
	chosen  Layout
	log     *zap.Logger
}

func (a *autoLayout) Name() string { return "auto" }

func (a *autoLayout) Recognize(t *Tree) bool { return a.pick(t) != nil }

func (a *autoLayout) Steps(t *Tree) []Candidate {
	if l := a.pick(t); l != nil {
		return l.Steps(t)
	}
	return nil
}

func (a *autoLayout) pick(t *Tree) Layout {
	if _, single := a.chosen.(*singleLayout); a.chosen != nil && !single {
		return a.chosen
	}
	// The single layout matches any checkpoint file in the root (a
	// trainer's args.pt saved before its first step folder): while it is
	// the choice, a more specific layout that comes to match replaces it.
	for _, l := range a.layouts {
		if _, single := l.(*singleLayout); single && a.chosen != nil {
			return a.chosen
		}
		if l.Recognize(t) {
			a.chosen = l
			a.log.Info("checkpoint layout detected", zap.String("layout", l.Name()), zap.String("dir", t.Root()))
			return l
		}
	}
	return nil
}

func (a *autoLayout) stepFolder(name string) bool {
	f, ok := a.chosen.(folderLayout)
	return ok && f.stepFolder(name)
}

// folderLayout is a layout whose steps can be folders in the root.
type folderLayout interface {
	// stepFolder reports whether a folder of this name in the root
	// would be a step.
	stepFolder(name string) bool
}

// linkedFolders returns a candidate for each link in the root named as the
// layout names a step folder: links are never followed, so such a step can
// never complete, and it waits with the reason for status and the warning
// that a wait of a settle window brings. Where the link points is not
// looked at: a stat through it would tell, as root, what lies outside the
// watch dir.
func linkedFolders(t *Tree, l Layout) []Candidate {
	f, ok := l.(folderLayout)
	if !ok {
		return nil
	}
	var out []Candidate
	for _, e := range t.Children("") {
		if !e.IsSymlink() || e.Err != nil || !f.stepFolder(e.Name()) {
			continue
		}
		out = append(out, Candidate{ID: "link:" + e.Name(), Step: Step{Number: -1, Root: e.Path},
			Held: "step folder " + e.Name() + " is a symbolic link (to " + e.Target + ")"})
	}
	return out
}

// effectiveName is the chosen layout's name for auto, or the layout's own.
func effectiveName(l Layout) string {
	if a, ok := l.(*autoLayout); ok && a.chosen != nil {
		return a.chosen.Name()
	}
	return l.Name()
}

// parseStep parses a step number from decimal digits, within the range the
// manifest keys can hold.
func parseStep(digits string) (int64, bool) {
	n, err := strconv.ParseInt(digits, 10, 64)
	if err != nil || n < 0 || n > manifest.MaxStep {
		return 0, false
	}
	return n, true
}

// folderStep collects the contents of a step folder: regular files with
// their ranks, links inside it, temporary names and entry errors. Files and
// links below a temporary folder are left out with it.
func folderStep(t *Tree, root string, number int64) Candidate {
	c := Candidate{Step: Step{Number: number, Root: root}}
	if e, ok := t.Get(root); ok && e.Err != nil {
		c.Errs = append(c.Errs, fmt.Errorf("list %s: %w", root, e.Err))
	}
	var walk func(dir string)
	walk = func(dir string) {
		t.eachChild(dir, func(e *Entry) {
			switch {
			case IsTempName(e.Name()):
				c.Temps = append(c.Temps, e.Path)
				return
			case e.Err != nil:
				c.Errs = append(c.Errs, fmt.Errorf("%s: %w", e.Path, e.Err))
			}
			addEntry(&c, e)
			if e.IsDir() {
				walk(e.Path)
			}
		})
	}
	walk(root)
	return c
}

// addEntry adds a regular file or a link to a candidate; other entries are
// never part of a step.
func addEntry(c *Candidate, e *Entry) {
	switch {
	case e.Err != nil:
	case e.IsRegular():
		c.Step.Files = append(c.Step.Files, File{RelPath: e.Path, Size: e.Size, ModTime: e.ModTime, Rank: e.Rank()})
	case e.IsSymlink():
		c.Step.Symlinks = append(c.Step.Symlinks, Symlink{RelPath: e.Path, Target: e.Target})
	}
}

// numberedDirs returns the folders directly in the root whose names match
// re, with the step number from re's first group.
func numberedDirs(t *Tree, re *regexp.Regexp) map[int64]string {
	out := map[int64]string{}
	t.eachChild("", func(e *Entry) {
		if !e.IsDir() {
			return
		}
		if m := re.FindStringSubmatch(e.Name()); m != nil {
			if n, ok := parseStep(m[1]); ok {
				out[n] = e.Path
			}
		}
	})
	return out
}

// pointerStep reads a pointer file ("latest") and parses the step it
// names with re; ok is false when the file is absent or unreadable or
// names no step.
func pointerStep(t *Tree, p string, re *regexp.Regexp) (int64, bool) {
	data, err := t.ReadSmall(p)
	if err != nil {
		return 0, false
	}
	m := re.FindStringSubmatch(strings.TrimSpace(string(data)))
	if m == nil {
		return 0, false
	}
	return parseStep(m[1])
}

// sortStep puts a candidate's lists in path order.
func sortStep(s *Step) {
	sort.Slice(s.Files, func(i, j int) bool { return s.Files[i].RelPath < s.Files[j].RelPath })
	sort.Slice(s.Symlinks, func(i, j int) bool { return s.Symlinks[i].RelPath < s.Symlinks[j].RelPath })
	sort.Slice(s.Generated, func(i, j int) bool { return s.Generated[i].RelPath < s.Generated[j].RelPath })
}
