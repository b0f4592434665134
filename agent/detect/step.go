package detect

import (
	"errors"
	"fmt"

	"github.com/ferrylabs/ferry/internal/step"
)

// Step is one checkpoint step as found on disk (see the step package).
type Step = step.Step

// File is a regular file of a step.
type File = step.File

// Symlink is a symbolic link of a step.
type Symlink = step.Symlink

// Expected is a file a framework's record names (see Step.Expect).
type Expected = step.Expected

// Generated is a small file synthesised for a step (see Step.Generated).
type Generated = step.Generated

// EventKind says what happened to a step.
type EventKind int

const (
	// Complete: the step is completely written and may be uploaded.
	Complete EventKind = iota + 1
	// Deleted: a step reported Complete (or Writing) has disappeared, or its files
	// changed after the report (Event.Err wraps ErrChanged then). An
	// upload in progress must be aborted and not committed. A changed step
	// that settles again is reported Complete again.
	Deleted
	// Error: the step is otherwise complete but cannot be read (for
	// example permission denied). It is reported again only if the error
	// changes, and Complete follows if the problem is fixed.
	Error
	// Writing: a step not complete yet whose files changed (with
	// Options.ReportWriting): Step holds its files as they are now, without
	// links or generated files. A caller may start sending what is already
	// written; Complete or Deleted follows.
	Writing
	// Lost: a step complete by its layout's rules, waiting out the settle
	// window or its files' closes, vanished before it was reported
	// Complete (a trainer's cleanup deleting it within seconds). Step
	// holds it as last seen. Nothing of it can be uploaded any more; the
	// caller says so.
	Lost
)

// String returns the kind's name.
func (k EventKind) String() string {
	switch k {
	case Complete:
		return "complete"
	case Deleted:
		return "deleted"
	case Error:
		return "error"
	case Writing:
		return "writing"
	case Lost:
		return "lost"
	}
	return fmt.Sprintf("EventKind(%d)", int(k))
}

// Event is what the Watcher sends for a step.
type Event struct {
	Kind EventKind
	// Step is the step as found (Complete, Error) or as last reported
	// (Deleted).
	Step Step
	// Err is set for Error events, and for Deleted events of steps that
	// changed rather than vanished.
	Err error
}

// ErrChanged is wrapped by a Deleted event's Err when a reported step's
// files were modified, removed or added rather than the whole step vanishing:
// the trainer rewrote the step, or the report came too early.
var ErrChanged = errors.New("step changed after it was reported complete")
