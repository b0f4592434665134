// Package copier copies committed checkpoint steps from one store to
// another (R2 to S3 and back, or between two buckets of one store) without
// a local disk.
//
// Each object streams through memory in parts: a ranged GET from the
// source, the part's BLAKE3 subtree and CRC32C computed from the buffer,
// the part sent to the destination. An object is completed at the
// destination only once all its bytes hash to the BLAKE3 its manifest
// records; otherwise its upload is aborted and the step fails. The step's
// manifest is committed at the destination last and create-only, as a push
// commits it: a step exists at the destination once, whole and verified.
//
// A copy stopped part way and started again sends only what the
// destination lacks: objects already complete there are found with one
// LIST per step folder, and an unfinished multipart upload is continued,
// each part the destination holds re-read from the source and kept when
// its size and CRC32C match. Files whose bytes the destination already
// holds for its previous committed step are deduplicated, as a push does.
//
// A pack of small files (manifest format 3) is one object for all its
// files: it is copied once, whole, with one GET and one PUT, after every
// file's BLAKE3 is checked over its range (pack.go).
package copier

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"go.uber.org/zap"
	"golang.org/x/sync/semaphore"

	"github.com/ferrylabs/ferry/internal/blake3tree"
	"github.com/ferrylabs/ferry/internal/remote"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/manifest"
)

// Defaults for Options fields left zero.
const (
	// DefaultConcurrency is the most object requests in flight (a GET and
	// the PUT of the bytes it fetched count as one).
	DefaultConcurrency = 32
	// DefaultPartSize is the multipart part size at the destination; a
	// file of at most this size is copied with one PUT.
	DefaultPartSize = 16 << 20
	// DefaultMemory bounds the bytes held in part buffers at once.
	DefaultMemory = 128 << 20
)

// ErrSourceCorrupt is returned (wrapped) when a source object's bytes do
// not match its manifest: a different size or BLAKE3.
var ErrSourceCorrupt = errors.New("source object does not match its manifest")

// ErrConflict is returned (wrapped) when the destination already holds the
// step committed with different content.
var ErrConflict = errors.New("step already committed at the destination with different content")

// Options say where to copy from and to, and how hard to push.
type Options struct {
	// From and To are the two stores; FromPrefix and ToPrefix the
	// checkpoint prefixes within them.
	From, To             store.Store
	FromPrefix, ToPrefix string
	// Concurrency bounds the object requests in flight. Default
	// DefaultConcurrency.
	Concurrency int
	// PartSize is the destination's multipart part size, rounded down to a
	// power of two and raised for files that would need more than
	// store.MaxParts parts. Default DefaultPartSize.
	PartSize int64
	// Memory bounds the bytes buffered at once. Default DefaultMemory, and
	// at least one part.
	Memory int64
	// Logger receives a line per step and debug lines per object.
	Logger *zap.Logger
}

// StepResult reports what copying one step did.
type StepResult struct {
	Step  int64 `json:"step"`
	Files int   `json:"files"`
	Bytes int64 `json:"bytes"`
	// AlreadyCommitted: the destination held the step with the same
	// content; nothing was sent.
	AlreadyCommitted bool `json:"already_committed"`
	// Sent objects and their bytes (parts kept from an earlier run
	// excluded).
	Sent      int   `json:"sent"`
	BytesSent int64 `json:"bytes_sent"`
	// Deduplicated files refer to an object of the destination's previous
	// committed step with the same bytes.
	Deduplicated int `json:"deduplicated"`
	// Present objects were found complete at the destination, left by an
	// earlier run of the copy.
	Present int `json:"present"`
	// PartsKept counts parts of unfinished uploads that an earlier run
	// sent and this one kept.
	PartsKept int `json:"parts_kept"`
}

// copier is one step's copy in progress.
type copier struct {
	o     Options
	log   *zap.Logger
	slots *semaphore.Weighted // requests in flight
	mem   *semaphore.Weighted // bytes buffered
	mu    sync.Mutex
	res   StepResult
}

func (o Options) withDefaults() Options {
	if o.Concurrency <= 0 {
		o.Concurrency = DefaultConcurrency
	}
	if o.PartSize <= 0 {
		o.PartSize = DefaultPartSize
	}
	// A power of two: every part a complete BLAKE3 subtree.
	o.PartSize = min(max(blake3tree.RangeSize(o.PartSize), 8<<20), 1<<30)
	if o.Memory <= 0 {
		o.Memory = DefaultMemory
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	return o
}

// CopyStep copies committed step from o.From to o.To and commits it there.
// A step the destination already holds with the same content is left as
// it is; with different content CopyStep fails with ErrConflict. Nothing is
// committed at the destination unless every object it names is there with
// bytes that hash to the manifest's BLAKE3.
func CopyStep(ctx context.Context, o Options, step int64) (StepResult, error) {
	o = o.withDefaults()
	c := &copier{o: o, log: o.Logger.With(zap.Int64("step", step)),
		slots: semaphore.NewWeighted(int64(o.Concurrency)), mem: semaphore.NewWeighted(max(o.Memory, o.PartSize))}
	c.res.Step = step
	src, err := remote.Get(ctx, o.From, o.FromPrefix, step)
	if err != nil {
		return c.res, fmt.Errorf("copy step %d: read the source manifest: %w", step, err)
	}
	c.res.Files, c.res.Bytes = len(src.Files), src.TotalBytes()
	current, err := c.destinationStep(ctx, src)
	if err != nil || c.res.AlreadyCommitted {
		return c.res, err
	}
	out, jobs, err := c.plan(ctx, src, current)
	if err != nil {
		return c.res, fmt.Errorf("copy step %d: %w", step, err)
	}
	if err := c.run(ctx, jobs); err != nil {
		return c.res, fmt.Errorf("copy step %d: %w", step, err)
	}
	if err := c.commit(ctx, src, current, out); err != nil {
		return c.res, fmt.Errorf("copy step %d: %w", step, err)
	}
	c.log.Debug("copied step", zap.Int("files", c.res.Files), zap.Int64("bytes", c.res.Bytes),
		zap.Int("sent", c.res.Sent), zap.Int64("bytes_sent", c.res.BytesSent),
		zap.Int("deduplicated", c.res.Deduplicated), zap.Int("present", c.res.Present), zap.Int("parts_kept", c.res.PartsKept))
	return c.res, nil
}

// destinationStep reads the step at the destination: nil when it is not
// there; AlreadyCommitted set when it holds src's content. A different
// content fails with ErrConflict, unless src is a later revision of the
// step (ferry agent repaired it at the source), which the copy then
// publishes as the destination's next revision.
func (c *copier) destinationStep(ctx context.Context, src *manifest.Manifest) (*manifest.Manifest, error) {
	dst, err := remote.Get(ctx, c.o.To, c.o.ToPrefix, src.Step)
	switch {
	case errors.Is(err, remote.ErrNoCheckpoint):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("copy step %d: read the destination's manifest: %w", src.Step, err)
	case manifest.SameContent(src, dst):
		c.res.AlreadyCommitted = true
		return dst, nil
	case src.Revision > dst.Revision:
		return dst, nil
	default:
		return nil, c.conflict(src.Step)
	}
}

func (c *copier) conflict(step int64) error {
	return fmt.Errorf("copy step %d: %w (compare the two with `ferry show --step %d`)", step, ErrConflict, step)
}

// commit publishes out at the destination: create-only, or as the next
// revision of current, the earlier revision the destination holds.
func (c *copier) commit(ctx context.Context, src, current, out *manifest.Manifest) error {
	if current == nil {
		if _, committed, err := remote.Commit(ctx, c.o.To, c.o.ToPrefix, out); err != nil {
			return fmt.Errorf("commit at the destination: %w", err)
		} else if !committed {
			c.res.AlreadyCommitted = true
		}
		return nil
	}
	_, written, err := remote.Revise(ctx, c.o.To, c.o.ToPrefix, src.Step, func(cur *manifest.Manifest) (*manifest.Manifest, error) {
		if !manifest.SameContent(cur, out) && cur.Revision >= src.Revision {
			return nil, c.conflict(src.Step)
		}
		return out, nil
	})
	if err != nil {
		return fmt.Errorf("revise at the destination: %w", err)
	}
	c.res.AlreadyCommitted = !written
	return nil
}

// add counts into the step's result under its lock.
func (c *copier) add(f func(r *StepResult)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f(&c.res)
}
