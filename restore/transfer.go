package restore

import (
	"os"
	"sync"

	"github.com/ferrylabs/ferry/internal/blake3tree"
)

// transfer is one download attempt of one file into a temp file. Workers
// fetch its chunks in any order, write them with WriteAt and hash each one
// as it passes through their buffer: chunks are power-of-two sized and
// aligned, so each is a complete subtree of the file's BLAKE3 tree, and the
// file's goroutine combines the chunks' roots once all have ended.
type transfer struct {
	job    *fileJob
	seq    int // position in the plan: lower is fetched first
	f      *os.File
	chunk  int64
	chunks int
	// align is the direct I/O alignment of f's writes, 0 when buffered.
	// Direct writes are whole blocks: the file's last one is padded and the
	// file truncated to its size before it is placed.
	align int64
	// run, when set, makes the transfer a run of packed files (packs.go),
	// fetched as one chunk by fetchRun; f is then nil.
	run *run

	// Owned by the queue's lock.
	next    int // next chunk to hand out
	writers int // chunks handed out and not yet finished
	hindex  int // position in the heap, -1 when not queued

	mu      sync.Mutex
	nodes   []blake3tree.Node // per chunk, set when its GET has ended
	sum     string            // the file's BLAKE3, for a file of one chunk
	ended   int               // chunks whose GETs are over, checks included
	err     error
	written int64         // bytes written by workers, for Result.BytesDownloaded
	wake    chan struct{} // signalled when a chunk ends or err is set
}

func newTransfer(job *fileJob, seq int, f *os.File, chunk, align int64) *transfer {
	n := chunks(job.file.Size, chunk)
	return &transfer{job: job, seq: seq, f: f, chunk: chunk, chunks: n, align: align, hindex: -1,
		nodes: make([]blake3tree.Node, n), wake: make(chan struct{}, 1)}
}

// chunks is how many ranged GETs of chunk bytes a file of size bytes
// takes: none for an empty file.
func chunks(size, chunk int64) int {
	return int((size + chunk - 1) / chunk)
}

// span returns the byte range [off, end) of chunk i.
func (t *transfer) span(i int) (off, end int64) {
	off = int64(i) * t.chunk
	return off, min(off+t.chunk, t.job.file.Size)
}

// wrote records n more bytes written and returns the attempt's total.
func (t *transfer) wrote(n int64) int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.written += n
	return t.written
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

// chunkEnded records that chunk i's GET is over, with the root of the
// chunk's hash subtree.
func (t *transfer) chunkEnded(i int, n blake3tree.Node) {
	t.mu.Lock()
	t.nodes[i] = n
	t.ended++
	t.mu.Unlock()
	t.signal()
}

// wholeEnded records that the GET of a file of one chunk is over, with the
// file's BLAKE3.
func (t *transfer) wholeEnded(sum string) {
	t.mu.Lock()
	t.sum = sum
	t.ended++
	t.mu.Unlock()
	t.signal()
}

func (t *transfer) state() (ended bool, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.ended == t.chunks, t.err
}
