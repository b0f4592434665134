package detect

import (
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/ferrylabs/ferry/internal/confine"
	"github.com/ferrylabs/ferry/manifest"
)

// engine holds what both the long-running Watcher and a one-shot Scan need:
// the options, the layout, the tree and the checks applied to a candidate
// before it is reported.
type engine struct {
	opts     Options
	log      *zap.Logger
	layout   Layout
	tree     *Tree
	rootReal string // the root with links resolved, for link checks
	warned   map[string]bool
	// openCheck, when set, replaces the readability check of a step's
	// files (tests inject failures with it).
	openCheck func(abs string) error
	// torn caches tornReason's verdicts (selfcheck.go).
	torn tornCache
	// linksSeen is set once Composer's latest-rank links were seen (or
	// Options.Linked said so): the composer layout sets it, the agent
	// reads it (Watcher.Linked) to remember it across restarts.
	linksSeen *atomic.Bool
	// nemo is what was seen of NeMo's markers, shared with the dcp
	// layout: the watch loop records them at their events (nemo.go).
	nemo *nemoSaves
}

func newEngine(opts Options, openCheck func(string) error) (*engine, error) {
	linked := new(atomic.Bool)
	linked.Store(opts.Linked)
	nemo := &nemoSaves{}
	l, err := newLayout(&opts, linked, nemo)
	if err != nil {
		return nil, err
	}
	return &engine{
		linksSeen: linked,
		opts:      opts,
		log:       opts.Logger,
		layout:    l,
		nemo:      nemo,
		tree:      newTree(opts.Dir),
		warned:    map[string]bool{},
		openCheck: openCheck,
	}, nil
}

// openForRead is the default readability check: the uploader will need to
// open every file, so a file it cannot open is found now, as an Error event
// for its step, rather than halfway through an upload. It opens the file
// as the uploader does, beneath the root and following no link, without
// blocking on a FIFO swapped in, and refuses a hard-linked file.
func openForRead(root *confine.Dir, f File) error {
	fh, _, err := root.OpenRegular(f.RelPath)
	if err != nil {
		return err
	}
	return fh.Close()
}

// rescan rebuilds the tree from disk and refreshes the resolved root.
func (e *engine) rescan(watch watchFunc) error {
	if err := e.tree.scanAll(watch); err != nil {
		return fmt.Errorf("scan %s: %w", e.tree.root, err)
	}
	real, err := filepath.EvalSymlinks(e.tree.root)
	if err != nil {
		return fmt.Errorf("scan %s: %w", e.tree.root, err)
	}
	e.rootReal = real
	return nil
}

// candidates asks the layout for the tree's steps and drops ambiguous ones
// (two candidates with one ID, say "step_100" and "step-100" for DCP), with
// a warning, since they cannot both be step 100 remotely.
func (e *engine) candidates() []Candidate {
	cands := append(e.layout.Steps(e.tree), linkedFolders(e.tree, e.layout)...)
	count := make(map[string]int, len(cands))
	for i := range cands {
		count[cands[i].id()]++
	}
	out := cands[:0]
	for _, c := range cands {
		if count[c.id()] > 1 {
			key := "dup\x00" + c.id() + "\x00" + c.Step.Root
			if !e.warned[key] {
				e.warned[key] = true
				e.log.Warn("several checkpoints claim the same step; skipped", zap.String("step", c.id()), zap.String("root", c.Step.Root))
			}
			continue
		}
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Step.Number != out[j].Step.Number {
			return out[i].Step.Number < out[j].Step.Number
		}
		return out[i].id() < out[j].id()
	})
	return out
}

// blocked returns why a candidate cannot be complete whatever the settle
// window says, or "".
func (e *engine) blocked(c *Candidate) string {
	if c.ByTrainer {
		return e.blockedByFiles(c)
	}
	switch {
	case c.Held != "" && len(c.Step.Files) == 0:
		return c.Held
	case len(c.Step.Files) == 0:
		return "no files yet"
	case !c.Finished && !e.opts.NoMarker:
		return "marker: " + c.Waiting
	case len(c.Temps) > 0:
		return "temporary file " + c.Temps[0]
	case c.Held != "":
		return c.Held
	}
	if e.opts.ExpectedRanks > 0 {
		if w := writers(c); len(w) < e.opts.ExpectedRanks {
			return fmt.Sprintf("files of %d of %d expected ranks", len(w), e.opts.ExpectedRanks)
		}
	}
	if p, why := e.tornFile(c); p != "" {
		return "file " + p + ": " + why
	}
	return unrecordable(c)
}

// unrecordable says why a name of the step cannot be recorded in a
// manifest (a newline, a backslash, invalid UTF-8...), "" when all can:
// such a step is held before a byte is sent, not refused at the commit
// after every byte was.
func unrecordable(c *Candidate) string {
	for _, f := range c.Step.Files {
		if err := manifest.CheckPath(f.RelPath); err != nil {
			return "name " + err.Error() + ": the manifest cannot record it"
		}
	}
	for _, l := range c.Step.Symlinks {
		if err := manifest.CheckPath(l.RelPath); err != nil {
			return "name " + err.Error() + ": the manifest cannot record it"
		}
	}
	return ""
}

// blockedByFiles is what holds back a step the trainer declared complete:
// no files, a temporary name, a torn file.
func (e *engine) blockedByFiles(c *Candidate) string {
	switch {
	case len(c.Step.Files) == 0:
		return "no files yet"
	case len(c.Temps) > 0:
		return "temporary file " + c.Temps[0]
	}
	if p, why := e.tornFile(c); p != "" {
		return "file " + p + ": " + why
	}
	return unrecordable(c)
}

// warnOutsideStep warns, once per link, about a link of a step folder
// whose target lies outside that folder (step-200/frozen.bin ->
// ../step-100/frozen.bin): the step records the link, not the file, so a
// restore of the step alone places a dangling link (restore warns too).
func (e *engine) warnOutsideStep(root string, l Symlink) {
	if root == "" || !strings.HasPrefix(l.RelPath, root+"/") {
		return
	}
	target := path.Join(parent(l.RelPath), l.Target)
	if strings.HasPrefix(target, root+"/") {
		return
	}
	key := "outside\x00" + l.RelPath + "\x00" + l.Target
	if e.warned[key] {
		return
	}
	e.warned[key] = true
	e.log.Warn("a link of the step points outside its folder: the step records the link, not the file, so a restore of this step alone places a dangling link; save the file in the step",
		zap.String("link", l.RelPath), zap.String("target", l.Target), zap.String("step_folder", root))
}

// build returns the step to report: the layout's step plus links in the
// root that point into it, every link checked (kept only if it resolves
// inside the root), all lists sorted.
func (e *engine) build(c *Candidate) Step {
	s := c.Step
	s.Dir, s.Files = e.tree.root, e.tree.located(s.Files)
	e.warnSpecial(s.Root)
	seen := map[string]bool{}
	var links []Symlink
	for _, l := range append(append([]Symlink(nil), s.Symlinks...), rootLinks(e.tree, &s)...) {
		if seen[l.RelPath] {
			continue
		}
		seen[l.RelPath] = true
		if l, ok := e.checkLink(l); ok {
			e.warnOutsideStep(s.Root, l)
			links = append(links, l)
		}
	}
	s.Symlinks = links
	s.Generated = append([]Generated(nil), s.Generated...)
	s.ID, s.Counted = c.id(), s.Number < 0
	sortStep(&s)
	return s
}

// warnSpecial warns, once per path, of the FIFOs, sockets and devices in
// a step's folder: never part of a step (layouts take regular files and
// links), so a checkpoint holding one is committed without it.
func (e *engine) warnSpecial(root string) {
	if root == "" {
		return // files in the watched root: its other entries are no step's
	}
	e.tree.Walk(root, func(en Entry) {
		if en.IsDir() || en.IsRegular() || en.IsSymlink() || en.Err != nil || e.warned["special\x00"+en.Path] {
			return
		}
		e.warned["special\x00"+en.Path] = true
		e.log.Warn("special file in a checkpoint skipped (a FIFO, socket or device is never uploaded)", zap.String("path", en.Path))
	})
}

// readable returns the entry errors of a candidate and the errors opening
// its files, joined, or nil.
func (e *engine) readable(c *Candidate, s *Step) error {
	errs := append([]error(nil), c.Errs...)
	var root *confine.Dir
	if e.openCheck == nil && len(s.Files) > 0 {
		var err error
		if root, err = confine.Open(e.tree.root); err != nil {
			return fmt.Errorf("step %s: %w", s.Name(), err)
		}
		defer root.Close()
	}
	for _, f := range s.Files {
		var err error
		if e.openCheck != nil {
			err = e.openCheck(f.LocalPath)
		} else {
			err = openForRead(root, f)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("step %s: %w", s.Name(), errors.Join(errs...))
}

// newestModTime returns the latest modification time among a step's files.
func newestModTime(s *Step) (t int64) {
	for _, f := range s.Files {
		if n := f.ModTime.UnixNano(); n > t {
			t = n
		}
	}
	return t
}
