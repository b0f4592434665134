package detect

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
)

// NeMo 2's rule (testdata/saveorders/nemo2.trace). NeMo's ModelCheckpoint
// brackets every save of a folder ("<name>", the top-k checkpoint, and
// "<name>-last", the copy save_last makes: two folders of one step, see
// mergeNeMoLast) with a marker file beside it, "<name>-unfinished": rank 0
// touches it before anything is written and removes it only after every
// rank finished and weights/.metadata, weights/metadata.json and context/
// are written. The removal is NeMo's own word that the folder is a
// checkpoint (AutoResume and the next start skip or delete folders that
// still have one). So the removal proves the folder's file set
// (ProofMarker: its writers' closes complete it, no settle window) when
//
//   - ferry saw the marker (at an fsnotify event or a look at the tree)
//     and then saw it gone: a folder whose marker it never saw (saved
//     before the agent started, or on a node without rank 0, where no
//     marker is written) has only the settle window;
//   - no file of the folder was modified after the removal was observed:
//     evidence counts only if it is newer than the bytes it vouches for;
//   - the job runs on one node (see apply).
//
// And it holds the step (its Cut, as a declared file deleted holds a step:
// never committed, and reported Lost should the rest go before it was
// reported) while
//
//   - a folder of the step has its marker (a save running, the -last copy
//     still being written or killed halfway): one folder of a step is
//     never committed while the other is being written;
//   - a folder finished before has its marker back: NeMo brackets the
//     removal of an old checkpoint (its rotation) with a new marker;
//   - a folder whose save began after every present folder's (the -last
//     copy of the step, or the top-k folder rotated away) is gone: what is
//     left is not a state the trainer completed. A present folder saved
//     again since (a rolled-back job saving only "<name>") is what that
//     save makes the step.
//
// DCP's record check (dcprecord.go) applies on top, folder by folder.
type nemoSaves struct {
	// markers are what was seen of each "-unfinished" marker, by path.
	markers map[string]*nemoMark
}

// nemoMark is what ferry saw of one marker: when it was seen appearing
// (a save of its folder began), when it was first seen gone after that
// (zero while present), and whether a save of the folder finished before
// this one began.
type nemoMark struct {
	began, gone time.Time
	finished    bool
}

// maxNeMoMarks bounds what nemoSaves remembers: markers of folders long
// gone are dropped first (forget).
const maxNeMoMarks = 1 << 12

// nemoMarkerOf is the marker NeMo writes for a checkpoint folder
// (format_checkpoint_unfinished_marker_path: the path without ".ckpt" and
// "-EMA", then "-unfinished").
func nemoMarkerOf(folder string) string {
	return strings.TrimSuffix(strings.TrimSuffix(folder, lightningSuffix), nemoEMA) + nemoUnfinished
}

// nemoPair is the other folder of a NeMo step: "<name>-last" for
// "<name>" and the other way round.
func nemoPair(folder string) string {
	if base, ok := strings.CutSuffix(folder, nemoLast); ok {
		return base
	}
	return folder + nemoLast
}

// observe records a look at a marker: present, or not.
func (n *nemoSaves) observe(marker string, present bool, now time.Time) {
	if n.markers == nil {
		n.markers = map[string]*nemoMark{}
	}
	m := n.markers[marker]
	switch {
	case present && m == nil:
		n.markers[marker] = &nemoMark{began: now}
	case present && !m.gone.IsZero():
		m.began, m.gone, m.finished = now, time.Time{}, true
	case !present && m != nil && m.gone.IsZero():
		m.gone = now
	}
}

// look observes marker in the tree now and reports whether it is there.
func (n *nemoSaves) look(t *Tree, marker string) bool {
	_, present := t.Get(marker)
	n.observe(marker, present, time.Now())
	return present
}

// noteNeMoMarker records, at its fsnotify event, a marker created or
// removed in the root: one touched and removed within a debounce window
// is still seen.
func (w *Watcher) noteNeMoMarker(rel string, ev fsnotify.Event) {
	if w.nemo == nil || !strings.HasSuffix(rel, nemoUnfinished) {
		return
	}
	w.nemo.observe(rel, !ev.Has(fsnotify.Remove) && !ev.Has(fsnotify.Rename), time.Now())
}

// apply holds the candidate of one NeMo folder while its marker or its
// pair's is there, and, with prove, makes the removal of its marker its
// proof when nothing of it is newer than the removal. A node of a
// multi-node job does not prove by it: the other nodes, which see no
// marker, wait out the settle window, and a part committed sooner than
// theirs can be merged with their part of a later save of the same step.
func (n *nemoSaves) apply(t *Tree, c *Candidate, folder string, prove bool) {
	own := nemoMarkerOf(folder)
	for _, m := range []string{own, nemoMarkerOf(nemoPair(folder))} {
		if n.look(t, m) && c.Finished {
			c.Finished, c.Waiting = false, "marker: "+m+" says NeMo's save of "+strings.TrimSuffix(m, nemoUnfinished)+" is not finished"
		}
	}
	if prove && c.Finished && n.proves(c, own) {
		c.Proof = ProofMarker
	}
}

// proves reports whether the removal of marker, seen after the marker
// itself, is newer than every file of c.
func (n *nemoSaves) proves(c *Candidate, marker string) bool {
	m := n.markers[marker]
	if m == nil || m.gone.IsZero() {
		return false
	}
	for _, f := range c.Step.Files {
		if f.ModTime.After(m.gone) {
			return false
		}
	}
	return true
}

// keepStep sets c.Cut, for the step whose folders present are on disk,
// when a folder of it finished before has its marker back, or when a
// folder whose save began after every present folder's is gone.
func (n *nemoSaves) keepStep(c *Candidate, present []string) {
	names := slices.Clone(present)
	for _, p := range present {
		if q := nemoPair(p); !slices.Contains(names, q) {
			names = append(names, q)
		}
	}
	for _, x := range names {
		m := n.markers[nemoMarkerOf(x)]
		switch {
		case m == nil:
		case m.gone.IsZero() && m.finished:
			c.Cut = fmt.Sprintf("%s is back: NeMo is removing %s (its rotation), or saving it again, after it was finished; the step waits for a finished save", nemoMarkerOf(x), x)
			return
		case !slices.Contains(present, x) && n.beganAfter(m, present):
			c.Cut = fmt.Sprintf("%s is gone, and its save began after the step's other folder's: what is left is not a state the trainer completed", x)
			return
		}
	}
}

// beganAfter reports whether m's save began after the save of every
// folder in present.
func (n *nemoSaves) beganAfter(m *nemoMark, present []string) bool {
	for _, p := range present {
		if o := n.markers[nemoMarkerOf(p)]; o != nil && !m.began.After(o.began) {
			return false
		}
	}
	return true
}

// forget drops, past maxNeMoMarks, what is remembered of markers that are
// gone, with their folders.
func (n *nemoSaves) forget(t *Tree) {
	if len(n.markers) <= maxNeMoMarks {
		return
	}
	for p, m := range n.markers {
		if !m.gone.IsZero() && !has(t, strings.TrimSuffix(p, nemoUnfinished)) {
			delete(n.markers, p)
		}
	}
}

func has(t *Tree, p string) bool {
	_, ok := t.Get(p)
	return ok
}

// isNeMoFolder reports whether a step folder is named as NeMo names one.
func isNeMoFolder(name string) bool { return nemoStep.MatchString(name) }

// mergeNeMoLast makes NeMo's "<name>-last" copy and "<name>" one step
// (restoring gives both folders, so the trainer finds the one it resumes
// from); any other group of folders claiming one step is left as it is,
// for the engine to skip with a warning. The merged step is proven only
// as far as both folders are.
func mergeNeMoLast(cs []Candidate) []Candidate {
	if len(cs) != 2 {
		return cs
	}
	a, b := cs[0], cs[1]
	if a.Step.Root+nemoLast != b.Step.Root {
		a, b = b, a
	}
	if a.Step.Root+nemoLast != b.Step.Root {
		return cs
	}
	m := a
	m.Step.Root = ""
	m.Step.Files = append(append([]File(nil), a.Step.Files...), b.Step.Files...)
	m.Step.Symlinks = append(append([]Symlink(nil), a.Step.Symlinks...), b.Step.Symlinks...)
	m.Temps = append(append([]string(nil), a.Temps...), b.Temps...)
	m.Errs = append(append([]error(nil), a.Errs...), b.Errs...)
	m.Step.Expect = append(append([]Expected(nil), a.Step.Expect...), b.Step.Expect...)
	sortExpected(m.Step.Expect)
	m.Finished = a.Finished && b.Finished
	m.Proof = min(a.Proof, b.Proof)
	m.Stale = a.Stale || b.Stale
	m.Disagrees = a.Disagrees || b.Disagrees
	if m.Waiting == "" {
		m.Waiting = b.Waiting
	}
	sortStep(&m.Step)
	return []Candidate{m}
}
