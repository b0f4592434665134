package detect

import (
	"fmt"
	"path"
	"slices"
	"sort"
	"strings"
	"time"

	"go.uber.org/zap"
)

// stat is what settling compares for one path.
type stat struct {
	path    string
	size    int64
	modTime int64
}

// fingerprint lists every file and temporary path of a candidate with its
// stat, in the candidate's order: a file added, removed, grown or touched
// changes it. Layouts list a step's contents in a fixed order, so equal
// contents give equal fingerprints.
type fingerprint []stat

func fingerprintOf(t *Tree, c *Candidate) fingerprint {
	fp := make(fingerprint, 0, len(c.Step.Files)+len(c.Temps))
	for _, f := range c.Step.Files {
		fp = append(fp, stat{f.RelPath, f.Size, f.ModTime.UnixNano()})
	}
	for _, p := range c.Temps {
		e, _ := t.Get(p)
		fp = append(fp, stat{p, e.Size, e.ModTime.UnixNano()})
	}
	return fp
}

func (a fingerprint) equal(b fingerprint) bool { return slices.Equal(a, b) }

func (a fingerprint) touched(paths map[string]struct{}) bool {
	if len(paths) == 0 {
		return false
	}
	for _, s := range a {
		if _, ok := paths[s.path]; ok {
			return true
		}
	}
	return false
}

// stepState is what the watcher remembers about a candidate between
// evaluations.
type stepState struct {
	fp fingerprint
	// since is when fp was first observed as it is now.
	since time.Time
	// due is since+Settle while the step waits only for the settle
	// window, else zero.
	due time.Time
	// refresh lists the folders to re-list when due: the step's folder
	// (recursively) or the folders holding its files.
	root string
	dirs []string
	// reported is set once the step was reported Complete, writing once
	// it was reported Writing (a Deleted event follows if it vanishes).
	// bornWatched is set when the step first appeared after the watch
	// began (it was written while ferry watched).
	bornWatched bool
	// settling is set while it is complete by the layout's rules and
	// waits only for time or closes (a Lost event follows if it vanishes).
	reported, writing, settling bool
	// resaved is set when the step changed after it was reported
	// complete: a save of it again, in place.
	resaved bool
	step    Step
	// errMsg is the last Error reported, to report each error once.
	errMsg string
}

// Pending is a step found on disk that is not complete yet, for status.
type Pending struct {
	// Step is the number read from names, -1 for a step the flat layout
	// numbers when it is reported.
	Step  int64  `json:"step"`
	Root  string `json:"root,omitempty"`
	Files int    `json:"files"`
	Bytes int64  `json:"bytes"`
	// State is "settling" (complete by the layout's rules, waiting out the
	// settle window) or "waiting" (for a marker, a rank, a temporary file).
	State  string `json:"state"`
	Reason string `json:"reason"`
	// Declared is set when the trainer declared the step written (its
	// marker is there and fresh, no file has a temporary name or is cut
	// short) and yet it waits: a rank the names never show, a link, a
	// marker no rank can satisfy. Once it has waited a settle window,
	// flush reports it rather than calling the run durable.
	Declared bool `json:"declared,omitempty"`
	// Stale is set when the step waits because its marker (or record) is
	// older than files it vouches for: saved again after it and never
	// vouched for again (a killed re-save, or a framework writing files
	// after its marker that ferry does not know). Quiet for a settle
	// window, flush reports it rather than calling the run durable.
	Stale bool `json:"stale,omitempty"`
	// Hint says what the operator can do about a declared step that
	// waits, for flush's answer.
	Hint string `json:"hint,omitempty"`
	// Since is when its files were last seen changing.
	Since time.Time `json:"since"`
	// Newest is its newest file's modification time: with Files and
	// Bytes, what tells this version from one committed before.
	Newest time.Time `json:"-"`
}

func pendingOf(c *Candidate, state, reason string, since time.Time) Pending {
	var newest time.Time
	for _, f := range c.Step.Files {
		if f.ModTime.After(newest) {
			newest = f.ModTime
		}
	}
	return Pending{Step: c.Step.Number, Root: c.Step.Root, Files: len(c.Step.Files), Bytes: c.Step.TotalBytes(),
		State: state, Reason: reason, Since: since.UTC(), Newest: newest}
}

// evaluate compares the tree with what was seen before and returns the
// events due at now, in step order, and the earliest time a pending step's
// settle window ends (zero if none). touched holds the paths fsnotify named
// since the last evaluation: a file named there has not settled even if its
// size and time look unchanged (coarse timestamps).
func (w *Watcher) evaluate(now time.Time, touched map[string]struct{}) (events []Event, next time.Time) {
	w.evals.Add(1)
	e := w.engine
	seen := map[string]bool{}
	var ready []Candidate
	var pending []Pending
	defer func() { w.pending.Store(&pending) }()
	layoutCands := e.candidates()
	w.noteNewestOnDisk(layoutCands)
	cands := w.declaredByTrainer(layoutCands)
	numbers := make(map[int64]bool, len(cands))
	for i := range cands {
		numbers[cands[i].Step.Number] = true
	}
	w.numbers.Store(&numbers)
	w.notePointer()
	w.noteLinks()
	defer func() { w.watchedOnce = true }()
	name := effectiveName(e.layout)
	w.chosen.Store(&name)
	for _, c := range cands {
		id := c.id()
		seen[id] = true
		fp := fingerprintOf(e.tree, &c)
		st := w.states[id]
		if st != nil && st.reported {
			if st.fp.equal(fp) {
				continue
			}
			events = append(events, Event{Kind: Deleted, Step: st.step, Err: fmt.Errorf("step %s: %w", st.step.Name(), ErrChanged)})
			st = &stepState{fp: fp, since: now, bornWatched: true, resaved: true}
			w.states[id] = st
		}
		if st == nil {
			st = &stepState{fp: fp, since: now, bornWatched: w.watchedOnce}
			w.states[id] = st
		} else if !st.fp.equal(fp) || fp.touched(touched) {
			st.fp, st.since = fp, now
		}
		st.root, st.dirs = c.Step.Root, fileDirs(&c)
		undeclared := false
		if why := w.declared(&c); why != "" && c.Held == "" {
			c.Held, undeclared = why, true
		}
		p, due := w.pendingState(&c, st.since, now, st.resaved)
		if p != nil && undeclared {
			p.Declared = false // changed since the trainer declared it
		}
		st.due = due
		// A complete step held because part of it was deleted since
		// its marker declared it (a cleanup, a rotation) was complete:
		// should the rest go too, it is reported lost.
		st.settling = p != nil && p.State == "settling" || undeclared && st.settling
		if st.settling {
			w.writingStep(&c) // what a Lost event shows
		}
		if p == nil {
			ready = append(ready, c)
			continue
		}
		pending = append(pending, *p)
		if !due.IsZero() {
			next = earliest(next, due)
		}
		if w.opts.ReportWriting && st.since.Equal(now) {
			st.writing = true
			events = append(events, Event{Kind: Writing, Step: w.writingStep(&c)})
		}
	}
	events = append(events, w.vanished(seen)...)
	events = append(events, w.report(ready)...)
	w.checkRecognized(now)
	if w.unrecognized.Load() == nil && !w.unrecognizedSince.IsZero() {
		next = earliest(next, w.unrecognizedSince.Add(w.opts.Settle)) // wake to warn
	}
	sort.SliceStable(events, func(i, j int) bool { return events[i].Step.Number < events[j].Step.Number })
	return events, next
}

// vanished forgets the steps that are no longer candidates (not in seen)
// and returns what their going means: Lost for a step that was settling
// and never reported (unless it was a version of a folder that a newer
// one replaced), Deleted for one
// that was reported or announced as being written.
func (w *Watcher) vanished(seen map[string]bool) []Event {
	var events []Event
	for id, st := range w.states {
		if seen[id] {
			continue
		}
		switch {
		case st.settling && !st.reported && !superseded(id):
			events = append(events, Event{Kind: Lost, Step: st.step})
		case st.reported || st.writing:
			events = append(events, Event{Kind: Deleted, Step: st.step})
		}
		delete(w.states, id)
		delete(w.decls, id)
	}
	return events
}

// pendingState says why a candidate is not complete yet (nil when it is),
// given when its files were first seen as they are, and when the settle
// window that holds it ends (zero: it waits for a change).
func (w *Watcher) pendingState(c *Candidate, since, now time.Time, resaved bool) (*Pending, time.Time) {
	e := w.engine
	if why := e.blocked(c); why != "" {
		e.log.Debug("step pending", zap.String("step", c.id()), zap.String("reason", why))
		p := pendingOf(c, "waiting", why, since)
		// A held step (a rank's pointer behind, model states without
		// optimizer states) is one a rank did not finish, as is one with
		// a temporary name or a torn file: not declared.
		p.Declared = c.Finished && c.Held == "" && len(c.Temps) == 0 && !strings.HasPrefix(why, "file ")
		// The framework's record is fresh and a file it names has another
		// size: the trainer declared a save that is not what it recorded.
		// (A named file missing is a cleanup's doing, or another node's
		// file: not declared, as a file deleted under an unchanged marker.)
		p.Declared = p.Declared || c.Disagrees
		p.Stale = c.Stale && !p.Declared
		switch {
		case p.Declared:
			p.Hint = stuckHint(c, why)
		case p.Stale:
			p.Hint = "if its save was killed, the step is not complete: save it again or remove it; if the framework writes files after its marker, see docs/agent.md (the frameworks' save orders)"
		}
		if warnAt := since.Add(e.opts.Settle); now.Before(warnAt) {
			return &p, warnAt // wake then to warn if it still waits
		}
		e.warnStuck(c, why)
		return &p, time.Time{}
	}
	// A step saved again in place, over files of its earlier save, is
	// whole by its closes only where a marker written after every file
	// says so: the ranks' old files still count (HF <= 4.35 rewrites
	// each rank's rng_state after trainer_state.json, with no barrier:
	// testdata/saveorders/hf-trainer-le435.trace), so between two ranks'
	// writes every file is closed and the step is a mix of two saves.
	// The settle window decides.
	if e.fastPath(c) && (!resaved || c.ByTrainer || c.Proof == ProofMarker) {
		if due, closed := w.closedAt(c); closed {
			if !now.Before(due) {
				return nil, time.Time{}
			}
			p := pendingOf(c, "settling", "its writers closed its files", since)
			return &p, due
		}
		if c.ByTrainer && w.closes != nil {
			// The trainer's word replaces the settle window, not the
			// closes: a file still open for writing is still written.
			p := pendingOf(c, "waiting", "declared complete by the trainer, but a file is still open for writing (or the kernel refuses ferry a lease on it)", since)
			p.Declared = true
			return &p, time.Time{}
		}
	}
	if due := since.Add(e.opts.Settle); now.Before(due) {
		p := pendingOf(c, "settling", fmt.Sprintf("unchanged for %v of %v (%s)", now.Sub(since).Round(100*time.Millisecond), e.opts.Settle, e.settleWhy(c)), since)
		return &p, due
	}
	if f := w.heldForWriting(c); f != "" {
		why := f + " is open for writing: a file with a writer is never settled, however long it is quiet"
		if now.After(since.Add(2 * e.opts.Settle)) {
			e.warnStuck(c, why)
		}
		p := pendingOf(c, "waiting", why, since)
		return &p, now.Add(writerRecheck)
	}
	return nil, time.Time{}
}

// writingStep is a step being written as a Writing event shows it: its
// files as they are now, and st.step for a Deleted event should it vanish.
func (w *Watcher) writingStep(c *Candidate) Step {
	s := Step{Number: c.Step.Number, Counted: c.Step.Number < 0, ID: c.id(), Root: c.Step.Root,
		Dir: w.tree.root, Files: w.tree.located(c.Step.Files)}
	w.states[c.id()].step = s
	return s
}

// report turns settled candidates into Complete or Error events, counted
// steps (Number -1) in the order the caller should number them.
func (w *Watcher) report(ready []Candidate) []Event {
	e := w.engine
	steps := make([]Step, len(ready))
	for i := range ready {
		steps[i] = e.build(&ready[i])
	}
	var events []Event
	for _, i := range counterOrder(steps) {
		c, s := &ready[i], &steps[i]
		st := w.states[c.id()]
		if err := e.readable(c, s); err != nil {
			if msg := err.Error(); msg != st.errMsg {
				st.errMsg = msg
				events = append(events, Event{Kind: Error, Step: *s, Err: err})
			}
			continue
		}
		st.reported, st.step, st.errMsg = true, *s, ""
		events = append(events, Event{Kind: Complete, Step: *s})
	}
	return events
}

// counterOrder returns the indexes of steps in the order they are reported:
// numbered steps first, by number, then counter steps (Number -1) by newest
// modification time and path.
func counterOrder(steps []Step) []int {
	idx := make([]int, len(steps))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool {
		sa, sb := &steps[idx[a]], &steps[idx[b]]
		if (sa.Number < 0) != (sb.Number < 0) {
			return sa.Number >= 0
		}
		if sa.Number >= 0 {
			return sa.Number < sb.Number
		}
		if ta, tb := newestModTime(sa), newestModTime(sb); ta != tb {
			return ta < tb
		}
		return firstPath(sa) < firstPath(sb)
	})
	return idx
}

func firstPath(s *Step) string {
	if len(s.Files) == 0 {
		return s.Root
	}
	return s.Files[0].RelPath
}

// fileDirs returns the folders holding a candidate's files and temporary
// names.
func fileDirs(c *Candidate) []string {
	set := map[string]bool{}
	for _, f := range c.Step.Files {
		set[parent(f.RelPath)] = true
	}
	for _, p := range c.Temps {
		set[parent(p)] = true
	}
	out := make([]string, 0, len(set))
	for d := range set {
		out = append(out, d)
	}
	sort.Strings(out)
	return out
}

// refreshDue re-reads from disk the steps whose settle window has ended, so
// that the evaluation that may report them does not trust events alone
// (lost events, writes through mmap, filesystems without events).
func (w *Watcher) refreshDue(now time.Time) {
	done := map[string]bool{}
	w.tree.within(func() {
		for _, st := range w.states {
			if st.reported || st.due.IsZero() || now.Before(st.due) {
				continue
			}
			if st.root != "" {
				w.scanDir(st.root, true, done)
				continue
			}
			for _, d := range st.dirs {
				w.scanDir(d, false, done)
			}
		}
	})
}

func (w *Watcher) scanDir(dir string, recursive bool, done map[string]bool) {
	if done[dir] {
		return
	}
	done[dir] = true
	if e, ok := w.tree.Get(dir); !ok || !e.IsDir() {
		if dir != "" {
			w.tree.refresh(dir, w.watchDir, false)
		}
		return
	}
	if err := w.tree.scanDir(dir, recursive, w.watchDir); err != nil {
		w.log.Debug("list folder", zap.String("dir", path.Clean("/"+dir)), zap.Error(err))
	}
}

func earliest(a, b time.Time) time.Time {
	if a.IsZero() || b.Before(a) {
		return b
	}
	return a
}
