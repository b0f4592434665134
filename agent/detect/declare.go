package detect

import (
	"fmt"
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
	if !c.Finished || c.Step.Marker == "" {
		return ""
	}
	m, ok := w.tree.Get(c.Step.Marker)
	if !ok {
		return ""
	}
	id := c.id()
	d := w.decls[id]
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
		case c.Moved && cur != s:
			return fmt.Sprintf("%s changed after %s declared the step complete, and %s now names a later step: the step was saved again without its own pointer write (an interrupted re-save?)", p, c.Step.Marker, c.Step.Marker)
		}
	}
	return ""
}
