package restore

import (
	"container/heap"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/zeebo/blake3"
	"go.uber.org/zap"

	"github.com/ferrylabs/ferry/internal/store"
)

// Buffer sizes: one copy buffer per download worker and one read-back
// buffer per file being hashed, so memory does not grow with ChunkSize.
const (
	copyBufSize = 1 << 20
	hashBufSize = 256 << 10
)

// maxChunkRetries is how many times a chunk is fetched again after a GET
// that fails or whose body breaks without any progress. The store retries
// failed requests itself; this covers bodies that break mid-stream, which
// only a new GET of the remaining range can repair.
const maxChunkRetries = 3

// ErrHashMismatch is returned (wrapped) when a downloaded file does not hash
// to the manifest's BLAKE3 twice in a row: the stored object is not what
// was committed, which downloading again will not fix.
var ErrHashMismatch = errors.New("BLAKE3 mismatch")

// transfer is one download attempt of one file into a temp file. Workers
// write its chunks with WriteAt in any order; the file's own goroutine
// hashes the temp file behind the frontier, the end of the contiguous
// prefix written so far.
type transfer struct {
	job    *fileJob
	seq    int // position in the plan: lower is fetched first
	f      *os.File
	chunk  int64
	chunks int

	// Owned by the queue's lock.
	next   int            // next chunk to hand out
	hindex int            // position in the heap, -1 when not queued
	active sync.WaitGroup // chunks handed out and not yet finished

	mu    sync.Mutex
	got   []int64 // bytes written per chunk
	first int     // first chunk not yet complete
	front int64   // bytes [0, front) are written
	ended int     // chunks whose GETs are over, checks included
	err   error
	wake  chan struct{} // signalled when front advances or err is set

	written int64 // bytes written by workers, for Result.BytesDownloaded (under mu)
}

func newTransfer(job *fileJob, seq int, f *os.File, chunk int64) *transfer {
	n := int((job.file.Size + chunk - 1) / chunk)
	return &transfer{job: job, seq: seq, f: f, chunk: chunk, chunks: n, hindex: -1,
		got: make([]int64, n), wake: make(chan struct{}, 1)}
}

// span returns the byte range [off, end) of chunk i.
func (t *transfer) span(i int) (off, end int64) {
	off = int64(i) * t.chunk
	return off, min(off+t.chunk, t.job.file.Size)
}

// advance records n more bytes written to chunk i and moves the frontier.
func (t *transfer) advance(i int, n int64) {
	t.mu.Lock()
	t.got[i] += n
	t.written += n
	moved := false
	for t.first < t.chunks {
		off, end := t.span(t.first)
		t.front = off + t.got[t.first]
		moved = true
		if t.front < end {
			break
		}
		t.first++
	}
	t.mu.Unlock()
	if moved {
		t.signal()
	}
}

// fail records the first error of any chunk for the file's goroutine.
func (t *transfer) fail(err error) {
	t.mu.Lock()
	if t.err == nil {
		t.err = err
	}
	t.mu.Unlock()
	t.signal()
}

func (t *transfer) signal() {
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// chunkEnded records that a chunk's GET is over. The last chunk's bytes can
// all be written before its GET has checked that the object ends there.
func (t *transfer) chunkEnded() {
	t.mu.Lock()
	t.ended++
	t.mu.Unlock()
	t.signal()
}

func (t *transfer) state() (front int64, ended bool, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.front, t.ended == t.chunks, t.err
}

// queue hands chunks to workers, always from the queued file with the
// lowest sequence number, so files finish in plan order and few temp files
// are partly written at any time, while all ranges of all files share one
// pool of workers.
type queue struct {
	mu     sync.Mutex
	cond   *sync.Cond
	h      transferHeap
	closed bool
}

func newQueue() *queue {
	q := &queue{}
	q.cond = sync.NewCond(&q.mu)
	return q
}

func (q *queue) push(t *transfer) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if t.chunks > 0 {
		heap.Push(&q.h, t)
		q.cond.Signal()
	}
}

// pop waits for a chunk and reports false once the queue is closed.
func (q *queue) pop() (*transfer, int, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.h) == 0 && !q.closed {
		q.cond.Wait()
	}
	if q.closed {
		return nil, 0, false
	}
	t := q.h[0]
	i := t.next
	t.next++
	if t.next == t.chunks {
		heap.Pop(&q.h)
	}
	t.active.Add(1)
	return t, i, true
}

// drop withdraws a transfer's remaining chunks and waits for the ones
// workers hold, after which nobody writes to its file any more.
func (q *queue) drop(t *transfer) {
	q.mu.Lock()
	if t.hindex >= 0 {
		heap.Remove(&q.h, t.hindex)
	}
	q.mu.Unlock()
	t.active.Wait()
}

func (q *queue) close() {
	q.mu.Lock()
	q.closed = true
	q.cond.Broadcast()
	q.mu.Unlock()
}

type transferHeap []*transfer

func (h transferHeap) Len() int           { return len(h) }
func (h transferHeap) Less(i, j int) bool { return h[i].seq < h[j].seq }
func (h transferHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].hindex, h[j].hindex = i, j
}
func (h *transferHeap) Push(x any) {
	t := x.(*transfer)
	t.hindex = len(*h)
	*h = append(*h, t)
}
func (h *transferHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	t.hindex = -1
	return t
}

// worker fetches chunks until the queue closes. Chunk errors go to the
// chunk's file, whose goroutine reports them with the file's name.
func (r *restorer) worker(ctx context.Context) {
	buf := make([]byte, copyBufSize)
	for {
		t, i, ok := r.queue.pop()
		if !ok {
			return
		}
		if err := r.fetchChunk(ctx, t, i, buf); err != nil {
			t.fail(err)
		} else {
			t.chunkEnded()
		}
		t.active.Done()
	}
}

// fetchChunk downloads chunk i of t into its temp file, re-requesting the
// remaining range when a body breaks.
func (r *restorer) fetchChunk(ctx context.Context, t *transfer, i int, buf []byte) error {
	off, end := t.span(i)
	size := t.job.file.Size
	key := t.job.file.Key
	retries := 0
	for pos := off; pos < end; {
		want := end - pos
		if end == size {
			// One byte more than the file holds: an object longer than the
			// manifest says shows up instead of going unnoticed.
			want++
		}
		var n int64
		rc, err := r.store.Get(ctx, key, pos, want)
		if err == nil {
			n, err = copyAt(ctx, t, i, rc, pos, end, buf)
			rc.Close()
			pos += n
		}
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var werr *writeError
		if errors.Is(err, store.ErrNotExist) || errors.Is(err, errTooLong) || errors.As(err, &werr) {
			return err // fetching again cannot help
		}
		if n > 0 {
			retries = 0 // a body that keeps delivering is worth following
		}
		if retries++; retries > maxChunkRetries {
			return fmt.Errorf("bytes %d-%d: %w", pos, end-1, err)
		}
		r.log.Warn("retrying ranged GET", zap.String("path", t.job.file.Path),
			zap.Int64("offset", pos), zap.Int("retry", retries), zap.Error(err))
		if err := sleep(ctx, time.Duration(retries)*100*time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}

var errTooLong = errors.New("object is longer than the manifest's size")

// writeError is a failure of the local disk (full, read-only), which no
// amount of re-fetching fixes.
type writeError struct{ err error }

func (e *writeError) Error() string { return e.err.Error() }
func (e *writeError) Unwrap() error { return e.err }

// copyAt streams a GET body into the temp file from pos up to end with a
// reused buffer, reporting progress after every write.
func copyAt(ctx context.Context, t *transfer, i int, body io.Reader, pos, end int64, buf []byte) (int64, error) {
	var total int64
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		// Fill the buffer before writing: fewer, larger writes, and less
		// contention on the file's inode lock among the workers.
		n, rerr := fill(body, buf)
		if n > 0 {
			if pos+int64(n) > end {
				return total, errTooLong
			}
			if _, err := t.f.WriteAt(buf[:n], pos); err != nil {
				return total, &writeError{err} // *PathError: names the temp file
			}
			pos += int64(n)
			total += int64(n)
			t.advance(i, int64(n))
		}
		if rerr == io.EOF {
			if pos < end {
				return total, fmt.Errorf("object ended at byte %d, manifest says %d bytes", pos, t.job.file.Size)
			}
			return total, nil
		}
		if rerr != nil {
			return total, rerr
		}
	}
}

// fill reads into buf until it is full or the reader returns an error
// (io.EOF included), which it returns unchanged with the bytes read.
func fill(r io.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := r.Read(buf[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// hashBehind hashes t's temp file as the frontier advances, so hashing
// overlaps the download. It returns the lower-case hex BLAKE3 once the
// whole file is written and read back and every GET has ended, or the first
// chunk error.
func (r *restorer) hashBehind(ctx context.Context, t *transfer) (string, error) {
	buf := r.hashBufs.Get().(*[]byte)
	defer r.hashBufs.Put(buf)
	h := blake3.New()
	size := t.job.file.Size
	var hashed, flushed int64
	for {
		front, ended, err := t.state()
		if err != nil {
			return "", err
		}
		if hashed == size && ended {
			break
		}
		if front <= hashed {
			select {
			case <-t.wake:
			case <-ctx.Done():
				return "", ctx.Err()
			}
			continue
		}
		for hashed < front {
			n := min(front-hashed, int64(len(*buf)))
			if _, err := t.f.ReadAt((*buf)[:n], hashed); err != nil {
				return "", fmt.Errorf("read back %s: %w", t.f.Name(), err)
			}
			h.Write((*buf)[:n])
			hashed += n
			r.progress(t.job, hashed)
		}
		if hashed-flushed >= writebackStep {
			startWriteback(t.f, flushed, hashed-flushed)
			flushed = hashed
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// writebackStep is how much verified data accumulates before its writeback
// to disk is started.
const writebackStep = 32 << 20

// hashFile returns the BLAKE3 of the first size bytes of f.
func (r *restorer) hashFile(ctx context.Context, f *os.File, size int64) (string, error) {
	buf := r.hashBufs.Get().(*[]byte)
	defer r.hashBufs.Put(buf)
	h := blake3.New()
	var hashed int64
	for hashed < size {
		if err := ctx.Err(); err != nil {
			return "", err
		}
		n, err := f.ReadAt((*buf)[:min(size-hashed, int64(len(*buf)))], hashed)
		h.Write((*buf)[:n])
		hashed += int64(n)
		if err != nil && !(err == io.EOF && hashed == size) {
			return "", err
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// restoreFile keeps a correct existing copy of one file or downloads it,
// once more after a hash mismatch (a byte flipped in transit should not fail
// a long restore), then fails.
func (r *restorer) restoreFile(ctx context.Context, job *fileJob, seq int) error {
	keep, err := r.keepExisting(ctx, job)
	if err != nil {
		return fmt.Errorf("check existing %s: %w", job.file.Path, err)
	}
	if keep {
		r.mu.Lock()
		r.kept++
		r.mu.Unlock()
		r.progress(job, job.file.Size)
		r.log.Debug("kept existing file", zap.String("path", job.file.Path))
		return nil
	}
	for attempt := 1; ; attempt++ {
		err := r.download(ctx, job, seq)
		if err == nil {
			r.mu.Lock()
			r.downloaded++
			r.mu.Unlock()
			r.log.Debug("restored file", zap.String("path", job.file.Path), zap.Int64("size", job.file.Size))
			return nil
		}
		if attempt > 1 || !errors.Is(err, ErrHashMismatch) || ctx.Err() != nil {
			return err
		}
		r.log.Warn("downloading file again", zap.String("path", job.file.Path), zap.Error(err))
	}
}

// keepExisting reports whether the final path already holds a regular file
// with the manifest's size and BLAKE3, as after an interrupted restore.
func (r *restorer) keepExisting(ctx context.Context, job *fileJob) (bool, error) {
	fi, err := r.root.Lstat(job.rel)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if !fi.Mode().IsRegular() || fi.Size() != job.file.Size {
		return false, nil
	}
	f, err := r.root.Open(job.rel)
	if err != nil {
		return false, err
	}
	defer f.Close()
	// The path was a regular file a moment ago; make sure it still is the
	// same one and not a symlink swapped in.
	if st, err := f.Stat(); err != nil || !os.SameFile(fi, st) {
		return false, err
	}
	sum, err := r.hashFile(ctx, f, job.file.Size)
	if err != nil {
		return false, err
	}
	return sum == job.file.BLAKE3, nil
}

// download fetches one file into a temp file beside its final path,
// verifies it and renames it into place. On any error the temp file is
// removed and the final path is untouched.
func (r *restorer) download(ctx context.Context, job *fileJob, seq int) (err error) {
	f, tmp, err := r.createTemp(job.rel)
	if err != nil {
		return fmt.Errorf("restore %s: %w", job.file.Path, err)
	}
	t := newTransfer(job, seq, f, r.opts.ChunkSize)
	placed := false
	defer func() {
		r.queue.drop(t) // after this no worker writes to f
		r.mu.Lock()
		r.fetched += t.written
		r.mu.Unlock()
		if !placed {
			f.Close()
			r.root.Remove(tmp)
		}
	}()
	r.queue.push(t) // a 0-byte file has no chunks: nothing to GET
	sum, err := r.hashBehind(ctx, t)
	if err != nil {
		return fmt.Errorf("download %s: %w", job.file.Path, err)
	}
	if sum != job.file.BLAKE3 {
		return fmt.Errorf("restore %s: %w: got %s, manifest says %s", job.file.Path, ErrHashMismatch, sum, job.file.BLAKE3)
	}
	if err := r.place(f, tmp, job); err != nil {
		return fmt.Errorf("restore %s: %w", job.file.Path, err)
	}
	placed = true
	return nil
}
