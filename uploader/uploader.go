// Package uploader moves local files into the object store: one object per
// file, multipart with one fixed part size per object for large files, a
// CRC32C on every request for the server to verify, a BLAKE3 of every file,
// and resumable multipart uploads backed by a small local state file.
//
// Each file is read twice, both times from the page cache in the common case:
// a sequential pass computes the file's BLAKE3 and each part's CRC32C
// together, and the upload pass streams each part from the file with an
// io.SectionReader. Parts are never buffered whole, so memory stays at a few
// MiB per hashing file whatever the part size and concurrency. The CRC32C
// computed in the same pass as the BLAKE3 binds the two: if the bytes sent
// differ from the bytes hashed (the file changed in between), the server
// rejects the part.
//
// A file with the same path and size as an entry of the previous committed
// step (File.Reuse) is hashed whole first, computing each part's CRC32C in
// the same pass: if its BLAKE3 matches, the earlier object is referenced
// and the file was read once; otherwise it is sent without being hashed
// again, so it is read twice, like any other file. The cost is that such a
// file's first part leaves only after the whole file is hashed (about
// 3 GB/s per core), where other files start sending after their first part.
//
// This package is ferry's implementation, used by cmd/ferry and ferry's
// other packages. It is importable, but its API carries no stability
// promise; the supported public API is package manifest (the remote format).
package uploader

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"
	"golang.org/x/sync/semaphore"

	"github.com/ferrylabs/ferry/internal/confine"
	"github.com/ferrylabs/ferry/internal/step"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/manifest"
)

// DefaultPartSize is the multipart part size unless told otherwise.
const DefaultPartSize = 64 << 20

// DefaultConcurrency caps the requests in flight unless told otherwise. It
// is an upper bound: what is in flight is sized by bytes (InFlightBytes),
// so small objects, each costing a round trip, get many requests at once
// and large parts few.
const DefaultConcurrency = 256

// DefaultInFlightParts sizes the default byte budget: as many bytes in
// flight as this many parts of the part size (16 x 64 MiB). Bodies are
// streamed from the files, so the budget bounds the link's queue, not
// memory.
const DefaultInFlightParts = 16

// maxHashing bounds the files read for hashing at once: enough to keep
// cores and disk busy, few enough that their buffers stay small.
const maxHashing = 16

// minRequestWeight is what a request counts against the byte budget at
// least: a request of a few bytes still costs a round trip and a buffer.
const minRequestWeight = 64 << 10

// readBufSize is the block size of the hashing pass.
const readBufSize = 1 << 20

// Options configure an Uploader: configuration only. What a push achieves
// is reported to PushOptions.Progress.
type Options struct {
	Store store.Store
	// PartSize is the requested part size; it is raised per object so that
	// no object needs more than store.MaxParts parts. Files no larger than
	// it go up in a single PUT.
	PartSize int64
	// Concurrency caps the upload requests in flight across all files
	// (default DefaultConcurrency).
	Concurrency int
	// InFlightBytes bounds the request bodies in flight across all files
	// (default DefaultInFlightParts x PartSize): a request takes its body's
	// size, at least minRequestWeight and at most the whole budget.
	InFlightBytes int64
	// state records multipart uploads in flight so that a killed upload
	// resumes; nil disables resuming. Set by Destination.Push.
	state *resumeState
	// DropCache leaves the page cache as the upload found it: pages of a
	// file that were not cached before it was read are dropped once it is
	// sent (the agent: uploading 100 GB must not evict the trainer's data
	// set). Pages that were cached, such as a checkpoint just written,
	// stay as the kernel decides.
	DropCache bool
	// PackKey, when set, names the pack objects (see pack.go) that files
	// smaller than PackFileLimit are sent in: name is unique to the pack's
	// content. Without it every file is an object of its own.
	PackKey func(name string) string
	// NoPack sends every file as an object of its own (a push then sets
	// no PackKey): plain S3 objects that any tool reads whole.
	NoPack bool
	Logger *zap.Logger
}

// File is a local file to upload to Key.
type File struct {
	LocalPath string
	// RelPath is the path recorded in the manifest.
	RelPath string
	Key     string
	Rank    *int
	// Reuse, when set, is an earlier step's entry for the same path and
	// size. If the file's BLAKE3 equals Reuse.BLAKE3, the entry's object is
	// referenced and nothing is sent.
	Reuse *manifest.File
	// Dir, when set, is the directory RelPath is read beneath (the step's
	// step.Step.Dir): no symbolic link is followed on the way. Without it
	// the file is read beneath LocalPath's folder.
	Dir *confine.Dir
	// Seen, when set, is the file as the step was found complete: the
	// bytes its evidence vouches for. The file opened must be that one
	// (device and inode) with that size and modification time; a file
	// found otherwise is refused with ErrFileChanged rather than uploaded
	// as it is now (a version nobody declared complete, say a copy killed
	// halfway over it, or a folder swapped for a link).
	Seen *step.File
}

// Stats counts what an upload did.
type Stats struct {
	BytesHashed  int64
	BytesSent    int64
	PartsSent    int64
	PartsResumed int64 // parts the server already held from an earlier run or sent early
	// PartsResent counts parts sent while their file was written
	// (Destination.SendEarly) whose bytes changed afterwards, sent again.
	PartsResent int64
	Objects     int64
	// DedupFiles and DedupBytes count files not sent because an earlier
	// step's object holds the same content.
	DedupFiles int64
	DedupBytes int64
}

// Uploader uploads files. It is safe for concurrent use; all its Upload calls
// share its concurrency limit.
type Uploader struct {
	opts     Options
	progress Progress
	slots    chan struct{}
	bytes    *semaphore.Weighted
	// hashing bounds the hashing passes reading at once (each holds a
	// readBufSize buffer).
	hashing chan struct{}
	stats   struct {
		hashed, sent, parts, resumed, objects, resent atomic.Int64
		dedupFiles, dedupBytes                        atomic.Int64
	}
}

// New returns an Uploader; zero options take defaults.
func New(opts Options) *Uploader { return newUploader(opts, nil) }

// newUploader returns an Uploader that reports to p (nil: nothing).
func newUploader(opts Options, p Progress) *Uploader {
	if opts.PartSize <= 0 {
		opts.PartSize = DefaultPartSize
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = DefaultConcurrency
	}
	if opts.InFlightBytes <= 0 {
		opts.InFlightBytes = DefaultInFlightParts * opts.PartSize
	}
	opts.InFlightBytes = max(opts.InFlightBytes, minRequestWeight)
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	return &Uploader{opts: opts, progress: progressOr(p), slots: make(chan struct{}, opts.Concurrency),
		bytes: semaphore.NewWeighted(opts.InFlightBytes), hashing: make(chan struct{}, maxHashing)}
}

// Stats returns the totals of every upload so far.
func (u *Uploader) Stats() Stats {
	return Stats{
		BytesHashed:  u.stats.hashed.Load(),
		BytesSent:    u.stats.sent.Load(),
		PartsSent:    u.stats.parts.Load(),
		PartsResumed: u.stats.resumed.Load(),
		PartsResent:  u.stats.resent.Load(),
		Objects:      u.stats.objects.Load(),
		DedupFiles:   u.stats.dedupFiles.Load(),
		DedupBytes:   u.stats.dedupBytes.Load(),
	}
}

// objectPartSize returns the part size used for an object of size bytes: the
// requested size, raised to a whole MiB so that at most store.MaxParts parts
// are needed, and clamped to the store's limits.
func objectPartSize(size, requested int64) int64 {
	ps := requested
	if ps < store.MinPartSize {
		ps = store.MinPartSize
	}
	if min := (size + store.MaxParts - 1) / store.MaxParts; ps < min {
		ps = (min + 1<<20 - 1) &^ (1<<20 - 1)
	}
	if ps > store.MaxPartSize {
		ps = store.MaxPartSize
	}
	return ps
}

// singlePutLimit is the largest file sent with one PUT.
func (u *Uploader) singlePutLimit() int64 {
	if u.opts.PartSize < manifest.MaxSinglePut {
		return u.opts.PartSize
	}
	return manifest.MaxSinglePut
}

// Upload uploads files concurrently and returns one manifest entry per file,
// in the order given. On error nothing is committed by the caller, and
// multipart uploads stay recorded in the resume state so that a later Upload
// resumes them.
func (u *Uploader) Upload(ctx context.Context, files []File) ([]manifest.File, error) {
	out := make([]manifest.File, len(files))
	whole := make([]int, len(files))
	for i := range whole {
		whole[i] = i
	}
	var packs [][]packMember
	if u.opts.PackKey != nil {
		whole, packs = planPacks(files)
	}
	g, ctx := errgroup.WithContext(ctx)
	// Hashing passes run ahead of the sends but are bounded too: a file
	// (or pack) waits for a hashing slot, so at most Concurrency are open.
	hashers := make(chan struct{}, u.opts.Concurrency)
	var mu sync.Mutex
	start := func(run func() error) bool {
		select {
		case hashers <- struct{}{}:
		case <-ctx.Done():
			return false
		}
		g.Go(func() error {
			defer func() { <-hashers }()
			return run()
		})
		return true
	}
	for _, p := range packs {
		if !start(func() error {
			entries, err := u.uploadPack(ctx, p)
			mu.Lock()
			for k, e := range entries {
				out[p[k].i] = e
			}
			mu.Unlock()
			return err
		}) {
			return nil, waitErr(g, ctx)
		}
	}
	for _, i := range whole {
		f := files[i]
		if !start(func() error {
			mf, err := u.uploadFile(ctx, f)
			if err != nil {
				return fmt.Errorf("upload %s: %w", f.RelPath, err)
			}
			mu.Lock()
			out[i] = mf
			mu.Unlock()
			return nil
		}) {
			return nil, waitErr(g, ctx)
		}
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return out, nil
}

func waitErr(g *errgroup.Group, ctx context.Context) error {
	if err := g.Wait(); err != nil {
		return err
	}
	return ctx.Err()
}

// acquire takes a request slot and a body of n bytes from the byte
// budget, honouring cancellation; release(n) gives both back.
func (u *Uploader) acquire(ctx context.Context, n int64) error {
	select {
	case u.slots <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	if err := u.bytes.Acquire(ctx, u.weight(n)); err != nil {
		<-u.slots
		return err
	}
	return nil
}

func (u *Uploader) release(n int64) {
	u.bytes.Release(u.weight(n))
	<-u.slots
}

// weight is what a request of n bytes takes from the byte budget.
func (u *Uploader) weight(n int64) int64 {
	return min(max(n, minRequestWeight), u.opts.InFlightBytes)
}

// fileStamp identifies a version of a file's content.
type fileStamp struct {
	Size    int64 `json:"size"`
	ModTime int64 `json:"mtime_ns"`
}

// mtime is the stamp's modification time as a manifest records it: the
// time of the stat the file's bytes were hashed and sent under.
func (s fileStamp) mtime() manifest.NanoTime {
	return manifest.TimeOf(time.Unix(0, s.ModTime))
}

// ErrFileChanged is returned when a file changed size or mtime while it was
// being uploaded.
var ErrFileChanged = errors.New("file changed while being uploaded")

// checkUnchanged returns ErrFileChanged unless f has the stamp before.
func checkUnchanged(f File, before fileStamp) error {
	after, err := f.stat()
	if err != nil {
		return fmt.Errorf("stat after upload: %w", err)
	}
	if after != before {
		return changed(before, after)
	}
	return nil
}

// changed is the error for a file whose stamp went from before to after.
func changed(before, after fileStamp) error {
	return fmt.Errorf("%w (size %d -> %d): it must not be written to while ferry uploads it", ErrFileChanged, before.Size, after.Size)
}

// durable reports n more bytes on the server to the progress.
func (u *Uploader) durable(n int64) {
	if n > 0 {
		u.progress.Durable(n)
	}
}
