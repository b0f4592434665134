package detect

import (
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"time"
)

// Declarations. A fresh marker says "these files are the step" at the
// moment it is written; what happens to the step afterwards is not vouched
// for by the same marker. The watcher therefore remembers, per step, the
// files it saw when the marker first declared the step complete (and
// again each time the marker is rewritten), and holds the step back when:
//
//   - a declared file is gone while the marker is unchanged: a cleanup
//     deleted part of the step (optimizer states of an older step, to
//     save disk), which is not a state the trainer completed;
//   - a pointer marker in the root (DeepSpeed's latest, Megatron's
//     tracker) has moved on to a later step while this step's declared
//     files changed: a save of this step again (a rolled-back job) that
//     never got its own pointer write, even if the pointer, rewritten
//     for the later step, is newer than its files.
//
// Files added after a declaration are left to the layout's rules (another
// rank's files may land after the marker by design; a covered file added
// later makes the marker stale). A declaration lives as long as the
// watcher: after a restart the first look declares what is on disk, and
// the agent's journal guards committed steps (revisions never lose files).
type declaration struct {
	markerTime time.Time
	files      map[string]stat
}

// declared returns why c, finished by its layout's rules, is not the step
// its marker declared, or "". It records a declaration when the marker is
// new or rewritten and names the step.
func (w *Watcher) declared(c *Candidate) string {
	if c.Cut != "" {
		return c.Cut
	}
	w.keepDeclared(c)
	if why := w.keepPointed(c); why != "" {
		return why
	}
	if why := w.folderLinked(c); why != "" {
		return why
	}
	if !c.Finished || c.Step.Marker == "" || c.ByTrainer {
		return ""
	}
	m, ok := w.tree.Get(c.Step.Marker)
	if !ok {
		return ""
	}
	id := c.id()
	d := w.decls[id]
	if d == nil && c.Moved {
		if why := w.namedWhileWatched(c); why != "" {
			return why
		}
	}
	if d == nil || !c.Moved && !m.ModTime.Equal(d.markerTime) {
		files := make(map[string]stat, len(c.Step.Files))
		for _, f := range c.Step.Files {
			files[f.RelPath] = stat{f.RelPath, f.Size, f.ModTime.UnixNano()}
		}
		w.decls[id] = &declaration{markerTime: m.ModTime, files: files}
		return ""
	}
	now := make(map[string]stat, len(c.Step.Files))
	for _, f := range c.Step.Files {
		now[f.RelPath] = stat{f.RelPath, f.Size, f.ModTime.UnixNano()}
	}
	for p, s := range d.files {
		cur, ok := now[p]
		switch {
		case !ok:
			return fmt.Sprintf("%s was deleted after %s declared the step complete (a cleanup?): this is not a state the trainer saved", p, c.Step.Marker)
		case c.Moved && cur != s && (c.Covers == nil || c.Covers(File{RelPath: p})):
			return fmt.Sprintf("%s changed after %s declared the step complete, and %s now names a later step: the step was saved again without its own pointer write (an interrupted re-save?)", p, c.Step.Marker, c.Step.Marker)
		}
	}
	if !c.Moved {
		// Files the marker does not cover may land after it (another
		// rank's): the declaration follows them while nothing is lost.
		d.files = now
	}
	return ""
}

// namedWhileWatched returns why a step whose pointer already names a later
// one cannot be declared now, or "". A step ferry saw being written (its
// folder appeared while it watched) is declared only by the pointer naming
// it, after its files' last write: a save interrupted before its pointer
// write and followed by a save of a later step leaves a pointer that is
// newer than the interrupted files and names a later step. Steps on disk
// when the watch began are taken as the pointer says (their history is
// unknown), and so are steps on network filesystems, whose times come from
// another clock.
func (w *Watcher) namedWhileWatched(c *Candidate) string {
	st := w.states[c.id()]
	if st == nil || !st.bornWatched || w.remote {
		return ""
	}
	newest := time.Time{}
	for _, f := range c.Step.Files {
		if (c.Covers == nil || c.Covers(f)) && f.ModTime.After(newest) {
			newest = f.ModTime
		}
	}
	if at, ok := w.pointed[c.Step.Number]; ok && !at.Before(newest) {
		return ""
	}
	return fmt.Sprintf("%s names a later step and was not seen naming this one after its files were written: the save of this step was interrupted before its pointer write", c.Step.Marker)
}

// notePointer records what the layout's pointer file names now, with the
// pointer's modification time: when it was written naming that step. It
// is read at every event in the root, so a pointer rewritten twice within
// one debounce window is still seen naming both steps.
func (w *Watcher) notePointer() {
	pl, ok := chosenLayout(w.layout).(pointerLayout)
	if !ok {
		return
	}
	p, parse := pl.pointer()
	data, mtime, err := readSmallAt(w.tree, p)
	if err != nil {
		return
	}
	if n, ok := parse(data); ok {
		if w.pointed == nil {
			w.pointed = map[int64]time.Time{}
		}
		if len(w.pointed) > 1<<14 {
			clear(w.pointed)
		}
		if mtime.After(w.pointed[n]) {
			w.pointed[n] = mtime
		}
	}
}

// pointerLayout is a layout whose marker is a pointer file in the root.
type pointerLayout interface {
	// pointer returns the pointer's path and how to read the step it names.
	pointer() (string, func([]byte) (int64, bool))
}

// chosenLayout is auto's choice, or l itself.
func chosenLayout(l Layout) Layout {
	if a, ok := l.(*autoLayout); ok && a.chosen != nil {
		return a.chosen
	}
	return l
}

// readSmallAt reads the start of a small regular file below t's root,
// confined as every read is (no link followed, no FIFO blocked on), with
// its modification time.
func readSmallAt(t *Tree, rel string) ([]byte, time.Time, error) {
	f, st, err := t.openRegular(rel)
	if err != nil {
		return nil, time.Time{}, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxSmallFile))
	if now, serr := f.Stat(); serr == nil && !now.ModTime().Equal(st.ModTime) {
		return nil, time.Time{}, fmt.Errorf("%s changed while read", rel)
	}
	return data, st.ModTime, err
}

// keepDeclared keeps finished a step a pointer declared complete once and
// whose files are still exactly those: a job rolled back to an earlier
// step rewrites the pointer to name it, which takes nothing from a later
// step that was complete.
func (w *Watcher) keepDeclared(c *Candidate) {
	d := w.decls[c.id()]
	if c.Finished || c.Stale || d == nil || len(d.files) != len(c.Step.Files) {
		return
	}
	for _, f := range c.Step.Files {
		if d.files[f.RelPath] != (stat{f.RelPath, f.Size, f.ModTime.UnixNano()}) {
			return
		}
	}
	c.Finished, c.Waiting = true, ""
}

// keepPointed does for per-rank pointers (Composer's latest-rank links,
// each repointed by its rank after its file) what declared and
// keepDeclared do for a marker: a step is declared when every file's rank
// names it, or a later step, after writing it. A declared file deleted
// since (a rank rotating the batch away while another rank, killed, never
// does) is not a state the trainer saved: it returns why. A rolled-back
// run that repoints the links at an earlier batch takes nothing from a
// step they declared complete before, while its files are exactly those.
func (w *Watcher) keepPointed(c *Candidate) string {
	if c.Step.Marker != "" || c.Proof != ProofRanks || c.ByTrainer {
		return ""
	}
	id := c.id()
	now := make(map[string]stat, len(c.Step.Files))
	for _, f := range c.Step.Files {
		now[f.RelPath] = stat{f.RelPath, f.Size, f.ModTime.UnixNano()}
	}
	d := w.decls[id]
	if d != nil {
		for p := range d.files {
			if _, ok := now[p]; !ok {
				return fmt.Sprintf("%s was deleted after every rank's latest link declared the step complete (a rotation or cleanup): this is not a state the trainer saved", p)
			}
		}
	}
	if why := w.linkedWhileWatched(c); why != "" {
		return why
	}
	if c.Held == "" && c.Finished && !c.Stale && len(c.Step.Files) > 0 && len(c.Ranks) == len(c.Step.Files) {
		w.decls[id] = &declaration{files: now}
		return ""
	}
	if !c.PointedBack || d == nil || len(d.files) != len(now) {
		return ""
	}
	for p, s := range d.files {
		if now[p] != s {
			return ""
		}
	}
	c.Held, c.PointedBack = "", false
	return ""
}

// linkedWhileWatched returns why a file of c is not vouched for by its
// rank's link, which names a later batch now or is missing while other
// ranks' links exist, or "": as for a pointer
// (namedWhileWatched), a rank whose save of this batch was interrupted
// before it repointed its link, and which saved a later batch since, has
// a link newer than the interrupted file naming a later batch. A step ferry
// saw being written is vouched for only by each rank's link seen naming it
// after that rank's file was written.
func (w *Watcher) linkedWhileWatched(c *Candidate) string {
	st := w.states[c.id()]
	if st == nil || !st.bornWatched || w.remote {
		return ""
	}
	for _, f := range c.Step.Files {
		if f.Rank == nil {
			continue
		}
		p := "latest-rank" + strconv.Itoa(*f.Rank) + ".pt"
		e, ok := w.tree.Get(p)
		what := "is missing"
		if ok && e.IsSymlink() {
			if b, ok := composerBatch(path.Base(e.Target)); !ok || b <= c.Step.Number {
				continue
			}
			what = "names a later batch"
		}
		if at, ok := w.linked[p][c.Step.Number]; ok && !at.Before(f.ModTime) || !w.gapSince(p, f.ModTime, c.Step.Number) {
			continue
		}
		return fmt.Sprintf("%s %s and was not seen naming this batch after %s was written: the save of this batch was interrupted before its rank's link", p, what, f.RelPath)
	}
	return ""
}

// folderLinked applies what ferry saw of Composer's links to a sharded
// folder (Candidate.Linked), as keepPointed and linkedWhileWatched do for
// single files. A folder seen linked after its last write keeps that
// declaration while the links name an earlier batch or are gone (a
// rolled-back run, the next save between removing and relinking them).
// Otherwise, rank 0 linking the folder after its .metadata, a folder
// ferry saw written whose link now names a later batch was complete only
// if it was never seen lagging behind it after the marker (it may have
// been linked and moved on between two looks): a save killed after
// .metadata and before the link, followed by the next save, is the
// other case.
func (w *Watcher) folderLinked(c *Candidate) string {
	if !c.Linked || c.ByTrainer {
		return ""
	}
	if c.PointedBack {
		if w.seenLinked(c) {
			c.Held, c.PointedBack = "", false
		}
		return ""
	}
	st := w.states[c.id()]
	m, ok := w.tree.Get(c.Step.Marker)
	if st == nil || !st.bornWatched || w.remote || !ok || w.seenLinked(c) {
		return ""
	}
	for _, rel := range slices.Sorted(maps.Keys(w.looks)) {
		if w.gapSince(rel, m.ModTime, c.Step.Number) {
			return fmt.Sprintf("%s was seen missing or naming an earlier batch after %s was written, and no link was seen naming batch %d since: the save of this batch was interrupted before rank 0 linked it",
				rel, c.Step.Marker, c.Step.Number)
		}
	}
	return ""
}

// seenLinked reports whether a latest-rank link was seen naming c's batch
// with a modification time no older than any file of c.
func (w *Watcher) seenLinked(c *Candidate) bool {
	newest := newestModTime(&c.Step)
	for _, seen := range w.linked {
		if at, ok := seen[c.Step.Number]; ok && at.UnixNano() >= newest {
			return true
		}
	}
	return false
}

// noteLinks records when each of Composer's latest-rank links was seen
// naming each batch (its modification time), as notePointer does for one
// pointer file; noteLink does it for one link at its event, so that a
// link repointed twice within one debounce window is seen naming both.
func (w *Watcher) noteLinks() {
	for _, e := range w.tree.Children("") {
		if e.IsSymlink() {
			w.recordLink(e.Path, e.Target, e.ModTime)
		}
	}
	for rel := range w.linked {
		if e, ok := w.tree.Get(rel); !ok || !e.IsSymlink() {
			w.observeLink(rel, -1)
		}
	}
}

// noteLink reads the link rel in the root from disk, if it is one of
// Composer's latest-rank links, and records what it names.
func (w *Watcher) noteLink(rel string) {
	if !composerLatest.MatchString(rel) {
		return
	}
	p := filepath.Join(w.tree.root, rel)
	fi, err := os.Lstat(p)
	if err != nil || fi.Mode()&os.ModeSymlink == 0 {
		w.observeLink(rel, -1)
		return
	}
	if target, err := os.Readlink(p); err == nil {
		w.recordLink(rel, target, fi.ModTime())
	}
}

// linkSeen is one look at a latest-rank link: when, and the batch it named
// (-1: missing).
type linkSeen struct {
	at    time.Time
	batch int64
}

// observeLink keeps the newest looks at a link.
func (w *Watcher) observeLink(rel string, batch int64) {
	if w.looks == nil || len(w.looks) > 1<<10 {
		w.looks = map[string][]linkSeen{}
	}
	l := append(w.looks[rel], linkSeen{time.Now(), batch})
	if len(l) > 64 {
		l = l[len(l)-64:]
	}
	w.looks[rel] = l
}

// gapSince reports whether the link rel was seen missing or naming a batch
// before batch b after the time since: its rank wrote a file of b and had
// not repointed its link when ferry looked. Without such a look nothing
// says the rank's save of b was interrupted (it may have repointed and
// moved on between two looks).
func (w *Watcher) gapSince(rel string, since time.Time, b int64) bool {
	for _, l := range w.looks[rel] {
		if !l.at.Before(since) && l.batch < b {
			return true
		}
	}
	return false
}

func (w *Watcher) recordLink(rel, target string, mtime time.Time) {
	if !composerLatest.MatchString(rel) {
		return
	}
	b, ok := composerBatch(path.Base(target))
	if !ok {
		return
	}
	w.observeLink(rel, b)
	if w.linked == nil || len(w.linked) > 1<<10 {
		w.linked = map[string]map[int64]time.Time{}
	}
	m := w.linked[rel]
	if m == nil || len(m) > 1<<14 {
		m = map[int64]time.Time{}
		w.linked[rel] = m
	}
	if mtime.After(m[b]) {
		m[b] = mtime
	}
}
