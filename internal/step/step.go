// Package step defines the one shape a checkpoint step has between disk and
// commit: agent/detect finds steps (for the agent and for ferry push) and
// the uploader pushes them.
package step

import (
	"strconv"
	"time"
)

// Step is one checkpoint step as found on disk: what agent/detect reports
// and what uploader.Destination.Push uploads.
type Step struct {
	// Number is the training step (batch, iteration) the layout read from
	// the names on disk, or -1 for a counted step.
	Number int64
	// Counted is true for a step whose names carry no number (the flat
	// layout without a step pattern): the caller numbers it, and since
	// such a number is not stable across restarts, a caller that remembers
	// steps must identify a counted step by Root and Files.
	Counted bool
	// ID identifies the step to the watcher for as long as it runs: the
	// number read from names, or the entry's name for a counted step. A
	// Deleted event carries the ID of the step it withdraws.
	ID string
	// Root is the step's folder relative to the watched root, or "" when the
	// step is made of files lying directly in the root (Composer's
	// single-file checkpoints, flat files, ferry push of a directory).
	// Files are matched with the previous step's after removing Root, so
	// checkpoint-200/tokenizer.json is compared with
	// checkpoint-100/tokenizer.json when deduplicating.
	Root string
	// Dir is the directory the files' RelPath is relative to (the watched
	// root, or the directory ferry push names): the uploader reads every
	// file beneath it and follows no symbolic link on the way
	// (internal/confine), so a folder swapped for a link after the scan
	// is refused, not followed out of it. Empty: each file is read beneath
	// its own folder (LocalPath's), as for files named one by one.
	Dir string
	// Files are the step's regular files, sorted by path.
	Files []File
	// Symlinks are links that belong to the step and point inside the root,
	// sorted by path.
	Symlinks []Symlink
	// Generated are small files the layout synthesises for this step rather
	// than reading them from disk: the framework's "latest" pointer as it
	// read when this step was the latest one. The live pointer is rewritten
	// in place at every save and may already name a newer step, so it is
	// never one of Files. Restoring Files plus Generated gives the trainer a
	// tree it resumes from at exactly this step.
	Generated []Generated
	// Marker is the path (as RelPath) of the file whose presence, written
	// after the others, proves the step complete (DCP's .metadata, Hugging
	// Face's trainer_state.json, DeepSpeed's latest...), or "" when the
	// layout has none. A caller comparing two versions of a step learns
	// from it whether the framework declared the newer one complete again.
	Marker string
	// Expect lists what the framework's own record of the step (DCP's
	// .metadata) says its files are: each path and the size it must have.
	// The uploader refuses to commit a step whose uploaded files disagree
	// (a file missing or of another size); on a node of a multi-node job,
	// where the record also names other nodes' files, the expectations
	// travel in the node's part and the merge checks the union.
	Expect []Expected
}

// Expected is one file a framework's record names (Step.Expect).
type Expected struct {
	// RelPath is slash-separated and relative to the watched root.
	RelPath string
	// Size is the size the record gives the file.
	Size int64
	// Record is the record's own path (as RelPath), for messages.
	Record string
}

// File is a regular file of a step.
type File struct {
	// RelPath is slash-separated and relative to the watched root: the
	// path recorded in the manifest and restored.
	RelPath string
	// LocalPath is where the file is on this machine.
	LocalPath string
	// Size and ModTime are as observed when the step was found complete;
	// the uploader reads the file only if it still has them (a zero
	// ModTime: not known, not checked).
	Size    int64
	ModTime time.Time
	// Dev and Ino identify the file the scan saw (0: not known, not
	// checked): the uploader reads that file and no other, and the agent
	// deletes (--keep-local) only that file.
	Dev, Ino uint64
	// Rank is the training rank the file belongs to when its name says
	// (detect.RankOf), nil for files shared by all ranks.
	Rank *int
}

// Symlink is a symbolic link of a step.
type Symlink struct {
	// RelPath is slash-separated and relative to the watched root.
	RelPath string
	// Target is relative to the link's directory and resolves inside the
	// root. It is the link's own text when that already is so; an absolute
	// target, or one that leaves the root on the way, is rewritten to the
	// relative path of the file it resolves to.
	Target string
}

// Generated is a small file synthesised for a step (see Step.Generated).
type Generated struct {
	// RelPath is slash-separated and relative to the watched root.
	RelPath string
	// Data is the file's whole content.
	Data []byte
}

// Name is how logs and errors name the step: its number, or its ID when
// it is counted.
func (s *Step) Name() string {
	if s.Counted {
		return s.ID
	}
	return strconv.FormatInt(s.Number, 10)
}

// TotalBytes returns the sum of the sizes of the step's files.
func (s *Step) TotalBytes() int64 {
	var n int64
	for _, f := range s.Files {
		n += f.Size
	}
	return n
}
