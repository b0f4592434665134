package restore

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"time"
	"unsafe"

	"github.com/zeebo/blake3"
	"go.uber.org/zap"

	"github.com/ferrylabs/ferry/internal/blake3tree"
	"github.com/ferrylabs/ferry/internal/ctxtime"
	"github.com/ferrylabs/ferry/internal/store"
)

// Buffer sizes: one copy buffer per download worker and one read-back
// buffer per existing file being checked, so memory does not grow with
// ChunkSize.
const (
	copyBufSize = 1 << 20
	hashBufSize = 256 << 10
)

// maxChunkRetries is how many times a chunk is fetched again after a GET
// that fails or whose body breaks without any progress. The store retries
// failed requests itself; this covers bodies that break mid-stream, which
// only a new GET of the remaining range can repair.
const maxChunkRetries = 3

// maxChunkRequests, plus one per requestsPerBytes of the chunk, bounds the
// GETs of one chunk however much each delivers: a server or path that keeps
// breaking bodies after a few bytes fails the restore with its error instead
// of trickling a 64 MiB chunk for hours, while one that breaks every few
// MiB still gets through.
const (
	maxChunkRequests = 32
	requestsPerBytes = 2 << 20
)

// pageCacheWrite is the largest write through the page cache. The
// filesystem sizes the page-cache folio it allocates by the write (ext4 and
// xfs use large folios), and on this project's VMs, whose balloon reports
// free 2 MiB blocks to the host, the system time of a restore swings with
// the write size: 8 x 256 MiB restored with a cold cache took 3.1-4.0 s
// with 1 MiB writes, 65% of the client's samples in the kernel's copy into
// the page cache. On a busier day of the same VM, rotated order, 16 runs
// each: 32 KiB writes 1.6-2.2 s of system time in every run, 64 KiB
// 1.5-10.4 s and 16 KiB 4.5-13.8 s (more writes, more contention on the
// inode lock). 32 KiB is also what s5cmd's copies write. The larger reads
// from the socket and the hashing are unchanged.
const pageCacheWrite = 32 << 10

// Direct I/O: the alignment assumed where the kernel does not report one
// (statx STATX_DIOALIGN, Linux 6.1+), and the alignment of every worker's
// buffer, the most a file may require. Chunks smaller than directBufAlign
// are written buffered.
const (
	defaultDirectAlign = 4096
	directBufAlign     = 4096
)

// writebackStep is how much a worker writes to its chunk before it starts
// the writeback of those bytes to disk, so the fsync before the rename has
// little left to wait for (Options.Fsync only).
const writebackStep = 32 << 20

// worker fetches chunks until the queue closes. Chunk errors go to the
// chunk's file, whose goroutine reports them with the file's name.
func (r *restorer) worker(ctx context.Context) {
	w := &chunkWriter{r: r, h: new(blake3tree.Range), whole: blake3.New()}
	for {
		t, i, ok := r.queue.pop()
		if !ok {
			return
		}
		var err error
		if t.run != nil {
			err = w.fetchRun(ctx, t)
		} else {
			err = w.fetch(ctx, t, i)
		}
		switch {
		case err != nil:
			t.fail(err)
		case t.run != nil:
			t.wholeEnded("")
		case t.chunks == 1:
			t.wholeEnded(hex.EncodeToString(w.whole.Sum(nil)))
		default:
			t.chunkEnded(i, w.h.Node())
		}
		r.queue.finish(t)
	}
}

// chunkWriter is a worker's state: its copy buffer and the hasher of the
// chunk it is fetching: a subtree hasher for a chunk of a file of several,
// the sequential (faster) BLAKE3 for a file of one chunk.
type chunkWriter struct {
	r     *restorer
	buf   []byte
	h     *blake3tree.Range
	whole *blake3.Hasher
	hw    io.Writer // h or whole, for the chunk being fetched

	t            *transfer
	pos, end     int64 // the chunk's bytes [pos, end) are still to come
	writebackPos int64 // bytes before it have had their writeback started
}

// fetch downloads chunk i of t into its temp file, hashing it on the way,
// and re-requests the remaining range when a body breaks.
func (w *chunkWriter) fetch(ctx context.Context, t *transfer, i int) error {
	off, end := t.span(i)
	weight := min(max(end-off, minGetWeight), w.r.opts.InFlightBytes)
	if err := w.r.inflight.Acquire(ctx, weight); err != nil {
		return err
	}
	defer w.r.inflight.Release(weight)
	class := bufClass(end - off)
	w.buf = w.r.getBuffer(class)
	defer func() {
		b := w.buf
		w.r.bufs[class].Put(&b)
		w.buf = nil
	}()
	if t.chunks == 1 {
		w.whole.Reset()
		w.hw = w.whole
	} else {
		if err := w.h.Reset(off); err != nil {
			return err
		}
		w.hw = w.h
	}
	w.t, w.pos, w.end, w.writebackPos = t, off, end, off
	defer func() { w.t = nil }()
	if err := w.getRange(ctx, off, end); err != nil {
		return err
	}
	if t.align == 0 && w.r.opts.Fsync && w.pos > w.writebackPos {
		startWriteback(t.f, w.writebackPos, w.pos-w.writebackPos)
	}
	return nil
}

// getRange GETs the chunk's bytes [off, end) of w.t into its temp file,
// asking again for the remaining range when a body breaks, within
// maxChunkRetries in a row without progress and maxChunkRequests in all.
func (w *chunkWriter) getRange(ctx context.Context, off, end int64) error {
	t := w.t
	size := t.job.file.Size
	key := t.job.file.Key
	// A packed file is a range of its pack, read from the bucket: the
	// peers exchange whole objects, not packs.
	base, st := t.job.file.Offset, w.r.store
	if t.job.file.Packed() {
		st = w.r.bucket
	}
	retries, requests := 0, 0
	maxRequests := maxChunkRequests + int((end-off)/requestsPerBytes)
	for w.pos < end {
		want := end - w.pos
		if end == size && !t.job.file.Packed() {
			// One byte more than the file holds: an object longer than the
			// manifest says shows up instead of going unnoticed.
			want++
		}
		start := w.pos
		requests++
		asked := time.Now()
		rc, err := st.Get(ctx, key, base+w.pos, want)
		if err == nil {
			w.r.ttfb.observe(time.Since(asked))
			rc = guardBody(rc, w.r.opts.LowSpeedLimit, w.r.opts.LowSpeedTime)
			err = w.copy(ctx, rc)
			rc.Close()
		}
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var werr *writeError
		if errors.Is(err, store.ErrNotExist) || errors.Is(err, errTooLong) || errors.As(err, &werr) {
			return err // fetching again cannot help
		}
		if errors.Is(err, errShort) {
			if short := w.truncated(ctx, key, err); short != nil {
				return short
			}
		}
		if w.pos > start && !errors.Is(err, errLowSpeed) {
			retries = 0 // a body that keeps delivering is worth following
		}
		if retries++; retries > maxChunkRetries {
			return fmt.Errorf("bytes %d-%d: %w", w.pos, end-1, err)
		}
		if requests >= maxRequests {
			return fmt.Errorf("bytes %d-%d: giving up after %d GETs of this range, each broken before its end: %w", w.pos, end-1, requests, err)
		}
		w.r.log.Warn("retrying ranged GET", zap.String("path", t.job.file.Path),
			zap.Int64("offset", w.pos), zap.Int("retry", retries), zap.Error(err))
		if err := ctxtime.Sleep(ctx, time.Duration(retries)*100*time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}

// truncated tells a truncated object from a body cut short: a body that
// ended cleanly before the range did may be either (a proxy that drops
// the length reads as a clean end), so one HEAD asks the bucket. An
// object shorter than the manifest records fails at once (err, with the
// object's size); otherwise truncated returns nil and the range is asked
// again as for any broken body.
func (w *chunkWriter) truncated(ctx context.Context, key string, err error) error {
	want := w.t.job.file.ObjectSize()
	info, herr := w.r.bucket.Head(ctx, key)
	if herr != nil || info.Size >= want {
		return nil
	}
	return fmt.Errorf("%w: the object has %d bytes, the manifest says %d", err, info.Size, want)
}

var (
	errTooLong = errors.New("object is longer than the manifest's size")
	errShort   = errors.New("object ended")
)

// writeError is a failure of the local disk (full, read-only), which no
// amount of re-fetching fixes.
type writeError struct{ err error }

func (e *writeError) Error() string { return e.err.Error() }
func (e *writeError) Unwrap() error { return e.err }

// copy streams a GET body into the temp file at w.pos, up to the chunk's
// end, with the worker's buffer. It fills the buffer before writing (fewer,
// larger writes) and hashes each read while it is still in the CPU cache.
// For a direct file it writes and hashes whole blocks only and keeps a
// partial block in the buffer for the next round; the bytes of a partial
// block left when the body breaks are fetched again, since w.pos, where the
// next GET starts, is always just past the bytes written and hashed.
func (w *chunkWriter) copy(ctx context.Context, body io.Reader) error {
	a := max(int(w.t.align), 1)
	size := w.t.job.file.Size
	carry := 0
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		n, hashed := carry, 0
		var rerr error
		for n < len(w.buf) && rerr == nil {
			var m int
			m, rerr = body.Read(w.buf[n:])
			n += m
			if w.pos+int64(n) > w.end {
				return errTooLong
			}
			if h := n &^ (a - 1); h > hashed {
				w.hw.Write(w.buf[hashed:h])
				hashed = h
			}
		}
		last := w.pos+int64(n) == size
		k := n &^ (a - 1)
		if last {
			k = n
			w.hw.Write(w.buf[hashed:n])
		}
		if k > 0 {
			if err := w.write(w.buf[:k], last); err != nil {
				return err
			}
		}
		carry = copy(w.buf, w.buf[k:n])
		if rerr == io.EOF {
			if w.pos < w.end {
				return fmt.Errorf("%w at byte %d, manifest says %d bytes", errShort, w.pos, size)
			}
			return nil
		}
		if rerr != nil {
			return rerr
		}
	}
}

// write writes p, a slice of w.buf that copy has hashed, at w.pos and
// reports progress. A chunk is written and hashed strictly in order, across
// re-requests too, so the hash covers exactly the bytes on disk. last says
// p ends the file: a direct write pads it to a whole block.
func (w *chunkWriter) write(p []byte, last bool) error {
	t := w.t
	out := p
	if a := t.align; a > 0 && last {
		padded := (int64(len(p)) + a - 1) &^ (a - 1)
		out = w.buf[:padded]
		clear(out[len(p):])
	}
	if _, err := writeAt(t.f, out, w.pos, t.align == 0); err != nil {
		// A device stricter than its reported alignment refuses direct
		// writes with EINVAL: go on buffered, which any file accepts.
		if !disableDirect(t.f, err) {
			return &writeError{err} // *PathError: names the temp file
		}
		w.r.log.Debug("direct I/O refused, writing buffered", zap.String("path", t.job.file.Path), zap.Error(err))
		if _, err := t.f.WriteAt(out, w.pos); err != nil {
			return &writeError{err}
		}
	}
	w.pos += int64(len(p))
	w.r.progress(t.job, t.wrote(int64(len(p))))
	if t.align == 0 && w.r.opts.Fsync && w.pos-w.writebackPos >= writebackStep {
		startWriteback(t.f, w.writebackPos, w.pos-w.writebackPos)
		w.writebackPos = w.pos
	}
	return nil
}

// writeAt writes p at off; through the page cache (buffered) it writes in
// pieces of at most pageCacheWrite bytes.
func writeAt(f *os.File, p []byte, off int64, buffered bool) (int, error) {
	if !buffered || len(p) <= pageCacheWrite {
		return f.WriteAt(p, off)
	}
	n := 0
	for len(p) > 0 {
		k := min(pageCacheWrite, len(p))
		m, err := f.WriteAt(p[:k], off)
		n += m
		if err != nil {
			return n, err
		}
		p, off = p[k:], off+int64(k)
	}
	return n, nil
}

// alignedBuffer returns n bytes starting at a multiple of align.
func alignedBuffer(n, align int) []byte {
	b := make([]byte, n+align)
	skip := 0
	if r := int(uintptr(unsafe.Pointer(&b[0])) & uintptr(align-1)); r != 0 {
		skip = align - r
	}
	return b[skip : skip+n : skip+n]
}

// minGetWeight is what a GET counts against the byte budget at least: a
// GET of a few bytes still costs a round trip and a buffer.
const minGetWeight = 64 << 10

// bufClasses are the copy buffer sizes: a GET's buffer is the smallest that
// holds its range (the extra byte asked for past a file's end never comes
// from a well-formed object: a read past the buffer finds it), or the largest, so that
// hundreds of small GETs in flight do not each hold a MiB.
var bufClasses = [...]int{64 << 10, 256 << 10, copyBufSize}

// bufClass returns the index in bufClasses of a range of n bytes.
func bufClass(n int64) int {
	for i, c := range bufClasses {
		if n <= int64(c) {
			return i
		}
	}
	return len(bufClasses) - 1
}

// getBuffer returns an aligned copy buffer of class c from its pool.
func (r *restorer) getBuffer(c int) []byte {
	if b, ok := r.bufs[c].Get().(*[]byte); ok {
		return *b
	}
	return alignedBuffer(bufClasses[c], directBufAlign)
}
