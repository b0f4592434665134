package detect

import (
	"time"

	"go.uber.org/zap"
)

// Writers: what the kernel says about who still writes a step's files. A
// close-write event and a read lease (closewrite.go) are the kernel's word;
// the settle window is only the fallback where it cannot be had.

// writerRecheck is how often a step held only by a file open for writing
// asks the kernel again: a writer that closes without writing (no event,
// no change) lets the step complete this soon.
const writerRecheck = 500 * time.Millisecond

// heldForWriting returns the first file of c that a process holds open
// for writing, as the kernel's read lease tells ("" when none does). The
// settle window only says that a file has been quiet: a rank paused
// mid-write (a collective, a slow peer, a page-cache stall) keeps its file
// open and quiet, and its half-written bytes must not be committed. Where
// the kernel cannot tell (a network filesystem, whose other hosts' writers
// hold no local lease; another user's file without CAP_LEASE; a system
// without leases) the settle window alone decides, as documented.
func (w *Watcher) heldForWriting(c *Candidate) string {
	if w.remote || !w.running.Load() {
		return ""
	}
	for _, f := range c.Step.Files {
		open, err := w.tree.openForWriting(f.RelPath)
		if err != nil {
			w.noteNoLease(err)
			continue
		}
		if open {
			return f.RelPath
		}
	}
	return ""
}

// noteNoLease logs once that the kernel refused a lease, so steps wait out
// the settle window without asking about writers.
func (w *Watcher) noteNoLease(err error) {
	if w.warned["lease"] {
		return
	}
	w.warned["lease"] = true
	w.log.Info("cannot ask the kernel whether a file is still open for writing; steps wait out the settle window", zap.Error(err))
}

// closedAt reports whether close-write detection vouches for every file of
// a candidate, and from when (the last close plus closeGrace, or the last
// close for a step the trainer declared complete: its word that the save
// is over replaces the wait for a writer that reopens): each file's writer
// closed it, it is unchanged since, and no process holds it open for
// writing now.
func (w *Watcher) closedAt(c *Candidate) (time.Time, bool) {
	if w.closes == nil || len(c.Step.Files) == 0 {
		return time.Time{}, false
	}
	var last time.Time
	for _, f := range c.Step.Files {
		abs := w.tree.abs(f.RelPath)
		at, recorded, unchanged := w.closes.closedAt(f, abs)
		switch {
		case !unchanged:
			return time.Time{}, false
		case !recorded && w.remote:
			return time.Time{}, false // other hosts' writers hold no local lease
		case !recorded:
			at = f.ModTime // closed before its watch existed (see closewrite.go)
		}
		open, err := w.tree.openForWriting(f.RelPath)
		if err != nil {
			w.noteNoLease(err)
		}
		if open {
			return time.Time{}, false
		}
		if at.After(last) {
			last = at
		}
	}
	if c.ByTrainer {
		return last, true
	}
	return last.Add(closeGrace), true
}
