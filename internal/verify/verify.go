// Package verify checks that committed steps are restorable without
// writing anything locally: each step's manifest and shards read and
// validate, every object they reference exists with the recorded size,
// and, when asked, every byte (or a random share of the files) hashes to
// the recorded BLAKE3. Problems are reported per file (per pack, naming
// its files, when a pack object is missing or of the wrong size), never
// fixed. A packed file's bytes are read from its pack, its own range only.
package verify

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.uber.org/zap"

	"github.com/ferrylabs/ferry/internal/remote"
	"github.com/ferrylabs/ferry/internal/store"
)

// DefaultConcurrency is how many ranged GETs --read-data keeps in flight.
const DefaultConcurrency = 16

// DefaultRangeSize is the size of one ranged GET of --read-data: a power
// of two, so each range hashes to a BLAKE3 subtree.
const DefaultRangeSize = 32 << 20

// Options configure Verify.
type Options struct {
	Store  store.Store
	Prefix string
	// Steps are the committed steps to check, in the order reported.
	Steps []int64
	// ReadShare is the share of each step's files whose bytes are read and
	// hashed: 0 none (presence and size only), 1 all, in between a random
	// choice of files holding about that share of the bytes.
	ReadShare float64
	// Concurrency bounds the ranged GETs in flight (default
	// DefaultConcurrency).
	Concurrency int
	Logger      *zap.Logger
}

// Kinds of problem.
const (
	// Manifest: the step's manifest or one of its shards cannot be read or
	// does not validate.
	Manifest = "manifest"
	// Missing: an object the manifest references is not in the bucket.
	Missing = "missing"
	// WrongSize: the object's size is not the file's, or for a pack not
	// the pack size the manifest records.
	WrongSize = "wrong size"
	// WrongHash: the object's bytes do not hash to the file's BLAKE3.
	WrongHash = "wrong hash"
	// Unreadable: reading the object failed.
	Unreadable = "unreadable"
)

// Problem is one thing wrong with a step: with one file (Path), or with a
// pack object (Key) and so with every file it holds (Paths), reported once
// rather than once per file.
type Problem struct {
	Step  int64    `json:"step"`
	Kind  string   `json:"problem"`
	Path  string   `json:"path,omitempty"`
	Paths []string `json:"paths,omitempty"`
	Key   string   `json:"key,omitempty"`
	// Detail is Kind said in full, for a person.
	Detail string `json:"detail"`
}

// String is one line, naming the file or every file of the pack, so that
// each file affected can be found in the text output too.
func (p Problem) String() string {
	name := p.Path
	if len(p.Paths) > 0 {
		name = strings.Join(p.Paths, ", ")
	}
	if name == "" {
		return fmt.Sprintf("step %d: %s: %s", p.Step, p.Kind, p.Detail)
	}
	return fmt.Sprintf("step %d: %s: %s: %s", p.Step, name, p.Kind, p.Detail)
}

// StepReport is what Verify found for one step.
type StepReport struct {
	Step      int64     `json:"step"`
	Files     int       `json:"files"`
	Bytes     int64     `json:"bytes"`
	FilesRead int       `json:"files_read"`
	BytesRead int64     `json:"bytes_read"`
	Problems  []Problem `json:"problems"`
}

// OK reports whether the step is restorable as far as checked.
func (r StepReport) OK() bool { return len(r.Problems) == 0 }

// Verify checks each of opts.Steps and returns one report per step. The
// error is for what stops the check itself (a cancelled context, a bucket
// that cannot be listed, a step that is not committed:
// remote.ErrNoCheckpoint); what is wrong with a step is in its report.
func Verify(ctx context.Context, opts Options) ([]StepReport, error) {
	if opts.Concurrency <= 0 {
		opts.Concurrency = DefaultConcurrency
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	out := make([]StepReport, 0, len(opts.Steps))
	for _, s := range opts.Steps {
		rep, err := verifyStep(ctx, opts, s)
		if err != nil {
			return out, err
		}
		out = append(out, rep)
	}
	return out, nil
}

// verifyStep checks one step.
func verifyStep(ctx context.Context, opts Options, step int64) (StepReport, error) {
	rep := StepReport{Step: step}
	m, err := remote.Get(ctx, opts.Store, opts.Prefix, step)
	if err != nil {
		if ctx.Err() != nil {
			return rep, ctx.Err()
		}
		if errors.Is(err, remote.ErrNoCheckpoint) {
			return rep, fmt.Errorf("step %d: %w", step, err)
		}
		// Only a manifest that does not validate is the bucket's fault; one
		// that could not be read (the network, a throttle) says nothing
		// about the step, and verify --mark-damaged must not record it.
		kind := Unreadable
		if errors.Is(err, remote.ErrInvalidManifest) {
			kind = Manifest
		}
		rep.Problems = append(rep.Problems, Problem{Step: step, Kind: kind, Detail: err.Error()})
		return rep, nil
	}
	rep.Files = len(m.Files)
	for _, f := range m.Files {
		rep.Bytes += f.Size
	}
	present, err := checkObjects(ctx, opts.Store, m.Files, opts.Concurrency)
	if err != nil {
		return rep, fmt.Errorf("verify step %d: %w", step, err)
	}
	absent, readable := present.problems(step, m.Files)
	rep.Problems = append(rep.Problems, absent...)
	if opts.ReadShare > 0 {
		chosen := choose(readable, opts.ReadShare)
		probs, err := readFiles(ctx, opts, step, chosen)
		if err != nil {
			return rep, fmt.Errorf("verify step %d: %w", step, err)
		}
		rep.Problems = append(rep.Problems, probs...)
		rep.FilesRead = len(chosen)
		for _, f := range chosen {
			rep.BytesRead += f.Size
		}
	}
	return rep, nil
}
