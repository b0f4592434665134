package detect

import (
	"errors"
	"fmt"
	"regexp"
	"time"

	"go.uber.org/zap"
)

// Defaults for the zero values of Options.
const (
	DefaultSettle       = 5 * time.Second
	DefaultDebounce     = 250 * time.Millisecond
	DefaultRescan       = 60 * time.Second
	DefaultPollInterval = 10 * time.Second
)

// Options configure a Watcher. Zero values take the defaults above.
type Options struct {
	// Dir is the directory the trainer saves into (required).
	Dir string
	// Layout names the layout: one of LayoutNames(), or "" for "auto".
	Layout string
	// Settle is how long every file of a step must stay unchanged before
	// the step is complete.
	Settle time.Duration
	// Debounce is how long fsnotify events are collected before they are
	// applied; it bounds the evaluations to one per window during writes.
	Debounce time.Duration
	// Rescan is the interval of full rescans when watching with fsnotify.
	Rescan time.Duration
	// Poll disables fsnotify and rescans every PollInterval instead, for
	// filesystems that deliver no events.
	Poll         bool
	PollInterval time.Duration
	// StepPattern is a regular expression that reads the step number from
	// a name: its first capturing group, or the whole match, must be
	// decimal digits. It is applied to the names of entries in the root by
	// the flat layout (entries that do not match are ignored) and to folder
	// names by the dcp layout (instead of the folder's trailing digits) and
	// the deepspeed layout (a Lightning DeepSpeedStrategy folder: dsnested.go).
	StepPattern string
	// ExpectedRanks, when positive, holds a step back until files of at
	// least that many distinct ranks are present. 0 means unknown: rely on
	// the marker and the settle window.
	ExpectedRanks int
	// NoMarker trusts the settle window alone and ignores the layout's
	// marker. Markers are written by global rank 0 only (DeepSpeed's
	// latest, Megatron's tracker file, DCP's .metadata, Hugging Face's
	// trainer_state.json), so a node that saves to a local disk and does not
	// hold rank 0 never sees them; there this option is the only way to
	// detect steps, and a pause of more than Settle inside a save makes a
	// step look complete too early.
	NoMarker bool
	// Linked says that Composer's latest-rank links were seen in this
	// watch dir before (the agent keeps Watcher.Linked in its journal):
	// its checkpoints are linked, so a Composer step no link names is
	// not complete, even while a save has removed every link to
	// repoint it. Without it the first link seen says so.
	Linked bool
	// Nodes is the number of nodes of the job (0 or 1: this node holds
	// the whole step). A framework's record (DCP's .metadata) names every
	// node's files: with several nodes a file it names that is not here
	// is another node's, checked when the parts are merged.
	Nodes int
	// CloseWrite makes a step whose files their writers have closed (and
	// left unchanged since) complete without waiting out Settle, on Linux
	// with fsnotify (see closewrite.go). Steps it cannot vouch for wait out
	// Settle as before.
	CloseWrite bool
	// ReportWriting sends a Writing event, at most once per evaluation, for
	// each step not complete yet whose files changed, so that its caller
	// can send parts of large files while they are written.
	ReportWriting bool
	// Logger receives warnings (skipped links, failed watches) and, at
	// debug level, why steps are pending. Nil means no logging.
	Logger *zap.Logger
}

func (o *Options) withDefaults() (Options, error) {
	c := *o
	if c.Dir == "" {
		return c, errors.New("detect: Options.Dir is required")
	}
	if c.Layout == "" {
		c.Layout = "auto"
	}
	if c.Settle <= 0 {
		c.Settle = DefaultSettle
	}
	if c.Debounce <= 0 {
		c.Debounce = DefaultDebounce
	}
	if c.Rescan <= 0 {
		c.Rescan = DefaultRescan
	}
	if c.PollInterval <= 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.ExpectedRanks < 0 {
		return c, fmt.Errorf("detect: Options.ExpectedRanks %d is negative", c.ExpectedRanks)
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	return c, nil
}

// compileStepPattern compiles Options.StepPattern; nil when it is empty.
func compileStepPattern(p string) (*regexp.Regexp, error) {
	if p == "" {
		return nil, nil
	}
	re, err := regexp.Compile(p)
	if err != nil {
		return nil, fmt.Errorf("detect: step pattern: %w", err)
	}
	return re, nil
}
