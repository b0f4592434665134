package uploader

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"

	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/ferrylabs/ferry/internal/blake3tree"
	"github.com/ferrylabs/ferry/internal/step"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/manifest"
)

// earlyFiles is how many files of a step SendEarly sends parts of at once.
const earlyFiles = 4

// EarlyStats counts what SendEarly sent.
type EarlyStats struct {
	Parts int64
	Bytes int64
}

// SendEarly sends the parts of step s's files that the trainer has
// already written in full, while the step is still being written, so that
// the push after the step is complete has only the rest to send. Each part
// is read twice (its BLAKE3 subtree digest and CRC32C, then the body the
// server checks against that CRC32C) and recorded in the step's resume
// state with its digest. Push later keeps such a part only where the
// file's final bytes hash to the same digest and re-sends the others, so a
// file rewritten in place, truncated or replaced after a part was sent
// never commits stale bytes.
//
// Only files with at least one whole part are touched, only whole parts
// below the file's current size are sent, and only when the part size is a
// power of two (a complete BLAKE3 subtree) and a state dir is set. stop is
// asked before each part: SendEarly returns once it says true. It must not
// run at the same time as Push or Abandon for the same step.
func (d Destination) SendEarly(ctx context.Context, s step.Step, o PushOptions, stop func() bool) (EarlyStats, error) {
	p := newPush(d, s, o)
	partSize := p.Upload.PartSize
	if partSize <= 0 {
		partSize = DefaultPartSize
	}
	if p.StateDir == "" || blake3tree.RangeSize(partSize) != partSize || manifest.CheckStep(p.Step) != nil {
		return EarlyStats{}, nil
	}
	var files []step.File
	for _, f := range s.Files {
		if f.Size >= 2*partSize { // one whole part, and more to come
			files = append(files, f)
		}
	}
	if len(files) == 0 {
		return EarlyStats{}, nil
	}
	// Not saved here: SendEarly runs at every change of a growing step,
	// and the state is written when an upload or a part is recorded.
	state, err := loadPushState(p)
	if err != nil {
		return EarlyStats{}, fmt.Errorf("send early: %w", err)
	}
	attempt := state.Attempt()
	e := &early{u: New(p.Upload), state: state, partSize: partSize, stop: stop}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(earlyFiles)
	for _, f := range files {
		key := manifest.DataKey(p.Prefix, p.Step, attempt, f.RelPath)
		g.Go(func() error { return e.sendFile(gctx, f, key) })
	}
	err = g.Wait()
	return EarlyStats{Parts: e.parts.Load(), Bytes: e.bytes.Load()}, err
}

// early is one SendEarly call: the step's shared resume state and counts.
type early struct {
	u            *Uploader
	state        *State
	partSize     int64
	stop         func() bool
	parts, bytes atomic.Int64
}

// sendFile sends the whole parts of f not sent yet.
func (e *early) sendFile(ctx context.Context, f step.File, key string) error {
	up, err := e.upload(ctx, key)
	if err != nil || up.UploadID == "" {
		return err
	}
	fh, err := os.Open(f.LocalPath)
	if err != nil {
		return nil // gone or unreadable: the watcher will say so
	}
	defer fh.Close()
	fi, err := fh.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return nil
	}
	// Never the part holding the current end: it is still growing.
	whole := int32((fi.Size() - 1) / e.partSize)
	h := new(blake3tree.Range)
	for n := int32(1); n <= whole; n++ {
		if _, sent := up.Digests[n]; sent {
			continue
		}
		if e.stop() || ctx.Err() != nil {
			return nil
		}
		if err := e.sendPart(ctx, fh, f, key, up.UploadID, n, h); err != nil {
			if errors.Is(err, ErrFileChanged) {
				return nil // shrank: the push sorts it out
			}
			return err
		}
	}
	return nil
}

// upload returns the early upload recorded for key, starting one if there
// is none; an empty UploadID when another kind of upload owns the key.
func (e *early) upload(ctx context.Context, key string) (Upload, error) {
	if up, ok := e.state.Get(key); ok {
		if !up.Early || up.PartSize != e.partSize {
			return Upload{}, nil
		}
		return up, nil
	}
	id, err := e.u.opts.Store.CreateMultipart(ctx, key)
	if err != nil {
		return Upload{}, fmt.Errorf("send early: create multipart upload: %w", err)
	}
	up := Upload{UploadID: id, PartSize: e.partSize, Early: true}
	if err := e.state.Put(key, up); err != nil {
		return Upload{}, fmt.Errorf("send early: %w", err)
	}
	return up, nil
}

// sendPart hashes part n of f (digest and CRC32C in one read) and sends it
// with that CRC32C, then records its digest.
func (e *early) sendPart(ctx context.Context, fh *os.File, f step.File, key, uploadID string, n int32, h *blake3tree.Range) error {
	off := int64(n-1) * e.partSize
	crc, node, err := e.u.hashSubtree(ctx, fh, h, off, e.partSize)
	if err != nil {
		return err
	}
	digest := node.Digest()
	if err := e.u.acquire(ctx, e.partSize); err != nil {
		return err
	}
	if _, err := e.u.sendPart(ctx, fh, File{RelPath: f.RelPath, Key: key}, uploadID, n, off, e.partSize, store.EncodeCRC32C(crc)); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, store.ErrNotExist) {
			// The upload is gone (aborted by a lifecycle rule, say): the
			// next pass starts another.
			return e.state.Remove(key)
		}
		// Not recorded: the push sends this part (a server that refused
		// its CRC32C saw bytes that changed between the two reads).
		return fmt.Errorf("send early: part %d of %s: %w", n, f.RelPath, err)
	}
	e.parts.Add(1)
	e.bytes.Add(e.partSize)
	if err := e.state.PutDigest(key, n, digest); err != nil {
		return fmt.Errorf("send early: %w", err)
	}
	return nil
}

// sentEarly reports whether parts of the file at key were sent while it
// was written: then the rest is sent without comparing the file with the
// previous step's first (it is new, or its bytes are mostly on the server).
func (u *Uploader) sentEarly(key string) bool {
	if u.opts.State == nil {
		return false
	}
	up, ok := u.opts.State.Get(key)
	return ok && up.Early
}

// abortEarly aborts the upload begun while the file at key was written,
// for a file that ended up small enough for one PUT.
func (u *Uploader) abortEarly(ctx context.Context, key string) {
	if u.opts.State == nil {
		return
	}
	if up, ok := u.opts.State.Get(key); ok && up.Early {
		abortUnused(ctx, u.opts.Store, key, up.UploadID, u.opts.Logger)
		if err := u.opts.State.Remove(key); err != nil {
			u.opts.Logger.Warn("could not update the upload state", zap.Error(err))
		}
	}
}
