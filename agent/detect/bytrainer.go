package detect

import (
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ferrylabs/ferry/internal/confine"
)

// The trainer's own word. `ferry commit --step N` (or the control socket's
// /commit) tells the watcher that step N is complete: whatever its layout
// would have guessed (a marker, ranks, the settle window), the step is
// reported Complete as soon as every one of its files is closed by its
// writer and held open for writing by no process (ProofClosed), and no file
// has a temporary name or is cut short by its format. The files are the
// layout's candidate for N, or, when the trainer names paths (files or
// folders below the root), exactly those.

// byTrainer holds the steps the trainer declared complete, safe to use
// from any goroutine.
type byTrainer struct {
	mu    sync.Mutex
	steps map[int64][]string // step -> paths named ("" entries never)
	// fresh holds the steps declared since the last evaluation: reported
	// again even if unchanged, so each declaration gets its answer.
	fresh map[int64]bool
	wake  chan struct{}
}

func newByTrainer() *byTrainer {
	return &byTrainer{steps: map[int64][]string{}, fresh: map[int64]bool{}, wake: make(chan struct{}, 1)}
}

// Declare records that the trainer says step n is complete, with the paths
// that make it (relative to the watched root, slash- or OS-separated, or
// absolute below it; none: the layout's step n). It checks the paths and
// returns an error naming a path that is outside the root or missing.
func (w *Watcher) Declare(n int64, paths []string) error { return w.DeclareFor(n, paths, nil) }

// Sees reports whether the caller of a declaration may see an entry
// beneath the root, from what lstat says of it: each folder on the way
// (last false) and the path named (last true). Nil: the caller sees what
// ferry sees.
type Sees func(st confine.Stat, o confine.Owner, last bool) bool

// DeclareFor is Declare for a caller who may see less than ferry: a path
// it may not see (sees refuses a folder on the way, or the path itself)
// gets the answer of a missing path, word for word, so the caller learns
// nothing of what it cannot look at.
func (w *Watcher) DeclareFor(n int64, paths []string, sees Sees) error {
	if n < 0 {
		return fmt.Errorf("step %d: a step is a number >= 0", n)
	}
	rel := make([]string, 0, len(paths))
	for _, p := range paths {
		r, err := w.relToRoot(p, sees)
		if err != nil {
			return err
		}
		rel = append(rel, r)
	}
	rel = foldPaths(rel)
	if err := w.namedAsOtherStep(n, rel); err != nil {
		return err
	}
	w.trainer.mu.Lock()
	w.trainer.steps[n] = rel
	w.trainer.fresh[n] = true
	w.trainer.mu.Unlock()
	select {
	case w.trainer.wake <- struct{}{}:
	default:
	}
	return nil
}

// namedAsOtherStep refuses a declaration of step n whose paths lie in a
// folder of the root named as another step (step-200/ declared as step
// 201): committed under the wrong number, it would be restored as the
// wrong step. Names are read as the dcp layout reads folders (its default
// rules, or Options.StepPattern).
func (w *Watcher) namedAsOtherStep(n int64, rel []string) error {
	pattern, err := compileStepPattern(w.opts.StepPattern)
	if err != nil {
		return err
	}
	for _, p := range rel {
		first, _, _ := strings.Cut(p, "/")
		var m int64
		var ok bool
		if pattern != nil {
			m, ok = stepFromName(pattern, first)
		} else {
			m, ok = DCPStepName(first)
		}
		if ok && m != n {
			return fmt.Errorf("%s is named as step %d, not %d: declare --step %d, or save step %d in a folder named for it", first, m, n, m, n)
		}
	}
	return nil
}

// Debounce is the watcher's debounce window.
func (w *Watcher) Debounce() time.Duration { return w.opts.Debounce }

// HasStep reports whether the last evaluation found step n on disk
// (complete or not). Safe to call while Run runs.
func (w *Watcher) HasStep(n int64) bool {
	m := w.numbers.Load()
	return m != nil && (*m)[n]
}

// NewestOnDisk returns the newest step number the layout found on disk at
// the last evaluation, whatever was declared (-1: none). Safe to call
// while Run runs.
func (w *Watcher) NewestOnDisk() int64 { return w.onDisk.Load() }

// noteNewestOnDisk records the newest step of the layout's candidates.
func (w *Watcher) noteNewestOnDisk(cands []Candidate) {
	newest := int64(-1)
	numbers := make(map[int64]bool, len(cands))
	for i := range cands {
		newest = max(newest, cands[i].Step.Number)
		numbers[cands[i].Step.Number] = true
	}
	w.onDisk.Store(newest)
	w.layoutNumbers.Store(&numbers)
}

// foldPaths returns the paths named, sorted, each once: a path named again,
// or below a folder also named, is the same files and is dropped (a
// declaration naming a file ten times must upload it once, and a manifest
// never holds a path twice). A folder sorts before every path below it, so
// one pass sees each folder before what it holds.
func foldPaths(rel []string) []string {
	sort.Strings(rel)
	named := make(map[string]bool, len(rel))
	out := rel[:0]
	for _, p := range rel {
		if named[p] || underNamed(p, named) {
			continue
		}
		named[p] = true
		out = append(out, p)
	}
	return out
}

// underNamed reports whether a folder above p is in named.
func underNamed(p string, named map[string]bool) bool {
	for i := strings.LastIndexByte(p, '/'); i > 0; i = strings.LastIndexByte(p[:i], '/') {
		if named[p[:i]] {
			return true
		}
	}
	return false
}

// HasLayoutStep reports whether the layout found step n on disk at the
// last evaluation, declarations left out. Safe to call while Run runs.
func (w *Watcher) HasLayoutStep(n int64) bool {
	m := w.layoutNumbers.Load()
	return m != nil && (*m)[n]
}

// Undeclare forgets what Declare said of step n.
func (w *Watcher) Undeclare(n int64) {
	w.trainer.mu.Lock()
	delete(w.trainer.steps, n)
	w.trainer.mu.Unlock()
}

// relToRoot maps a path the trainer named to a slash path below the root.
// The path is looked up as every path below the root is (internal/confine:
// from the root's open descriptor, no link followed on the way), with the
// agent's rights, which may exceed the caller's, and then with the
// caller's (sees): so a missing path, one through a link (r -> / planted
// in the watch dir), one the agent cannot look at and one in a folder the
// caller may not enter all get the same answer, and a caller learns
// nothing of what exists outside the watch dir or out of its sight.
func (w *Watcher) relToRoot(p string, sees Sees) (string, error) {
	abs := p
	if !filepath.IsAbs(p) {
		abs = filepath.Join(w.tree.root, p)
	}
	r, err := filepath.Rel(w.tree.root, filepath.Clean(abs))
	if err != nil || r == "." || r == ".." || strings.HasPrefix(r, ".."+string(filepath.Separator)) {
		return "", fmt.Errorf("%s is not below the watched directory %s", p, w.tree.root)
	}
	r = filepath.ToSlash(r)
	if !w.existsBeneath(r, sees) {
		return "", fmt.Errorf("%s: %w", p, ErrNoSuchPath)
	}
	return r, nil
}

// ErrNoSuchPath is Declare's error for a path that is not a file or
// folder beneath the watched directory reached without a link, or one
// the caller may not read (DeclareFor).
var ErrNoSuchPath = errors.New("no such file or folder below the watched directory that you may read (links on the way are not followed)")

// existsBeneath reports whether rel names something beneath the root,
// reached without following a link, that sees (if set) lets the caller
// see.
func (w *Watcher) existsBeneath(rel string, sees Sees) bool {
	d, err := confine.Open(w.tree.root)
	if err != nil {
		return false
	}
	defer d.Close()
	if sees == nil {
		sees = func(confine.Stat, confine.Owner, bool) bool { return true }
	}
	return d.Reachable(rel, sees)
}

// declaredByTrainer applies the trainer's declarations to the layout's
// candidates: a declared step's candidate, or one made of the paths named,
// is finished whatever the layout would have guessed.
func (w *Watcher) declaredByTrainer(cands []Candidate) []Candidate {
	t := w.trainer
	t.mu.Lock()
	declared := make(map[int64][]string, len(t.steps))
	for n, p := range t.steps {
		declared[n] = p
	}
	fresh := t.fresh
	t.fresh = map[int64]bool{}
	t.mu.Unlock()
	for n := range fresh {
		if st := w.states[strconv.FormatInt(n, 10)]; st != nil {
			st.reported = false // each declaration gets its answer
		}
	}
	if len(declared) == 0 {
		return cands
	}
	out := cands[:0]
	for _, c := range cands {
		paths, ok := declared[c.Step.Number]
		switch {
		case !ok:
			out = append(out, c)
		case len(paths) == 0:
			out = append(out, trainerFinished(c))
		} // named paths replace the layout's candidate
	}
	for n, paths := range declared {
		if len(paths) > 0 {
			out = append(out, trainerFinished(pathsStep(w.tree, n, paths)))
		}
	}
	return out
}

// trainerFinished marks a candidate complete by the trainer's word.
func trainerFinished(c Candidate) Candidate {
	c.ID = ""
	c.Finished, c.Stale, c.Moved, c.Waiting, c.Held = true, false, false, "", ""
	c.Proof, c.ByTrainer, c.Ranks = ProofClosed, true, nil
	return c
}

// pathsStep is the step made of the files and folders named.
func pathsStep(t *Tree, n int64, paths []string) Candidate {
	c := Candidate{Step: Step{Number: n}}
	for _, p := range paths {
		e, ok := t.Get(p)
		if !ok {
			c.Errs = append(c.Errs, fmt.Errorf("%s: no such file or folder", p))
			continue
		}
		if e.IsDir() {
			sub := folderStep(t, p, n)
			c.Step.Files = append(c.Step.Files, sub.Step.Files...)
			c.Step.Symlinks = append(c.Step.Symlinks, sub.Step.Symlinks...)
			c.Temps = append(c.Temps, sub.Temps...)
			c.Errs = append(c.Errs, sub.Errs...)
			continue
		}
		addEntry(&c, &e)
	}
	if len(paths) == 1 {
		if e, ok := t.Get(paths[0]); ok && e.IsDir() {
			c.Step.Root = paths[0]
		}
	}
	sortStep(&c.Step)
	return c
}
