package restore

import (
	"container/heap"
	"sync"
)

// maxWriters is how many chunks of one file are fetched at once while other
// files have chunks waiting. Buffered writes to one file serialise on its
// inode lock: with 16 workers on the two files whose 32 MiB chunks came
// first, 5% of the client's samples were spent spinning on that lock.
const maxWriters = 4

// queue hands chunks to workers from the queued file with the lowest
// sequence number that has fewer than maxWriters chunks in flight, so files
// finish in about plan order and few temp files are partly written at any
// time, while all ranges of all files share one pool of workers. When every
// queued file has maxWriters chunks in flight, the lowest one gets another:
// a worker never idles while there is a chunk to fetch.
type queue struct {
	mu     sync.Mutex
	cond   *sync.Cond // a chunk was queued or the queue closed
	idle   *sync.Cond // a transfer's last chunk in flight finished
	h      transferHeap
	closed bool
	done   chan struct{} // closed by close
}

func newQueue() *queue {
	q := &queue{done: make(chan struct{})}
	q.cond = sync.NewCond(&q.mu)
	q.idle = sync.NewCond(&q.mu)
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

// pop waits for a chunk and reports false once the queue is closed. The
// worker calls finish when the chunk is over.
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
	// The heap holds at most the files open at once (2 x Concurrency).
	for _, c := range q.h {
		if c.writers < maxWriters && (t.writers >= maxWriters || c.seq < t.seq) {
			t = c
		}
	}
	i := t.next
	t.next++
	if t.next == t.chunks {
		heap.Remove(&q.h, t.hindex)
	}
	t.writers++
	return t, i, true
}

// finish records that a worker is done with a chunk of t.
func (q *queue) finish(t *transfer) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if t.writers--; t.writers == 0 {
		q.idle.Broadcast()
	}
}

// drop withdraws a transfer's remaining chunks and waits for the ones
// workers hold, after which nobody writes to its file any more.
func (q *queue) drop(t *transfer) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if t.hindex >= 0 {
		heap.Remove(&q.h, t.hindex)
	}
	for t.writers > 0 {
		q.idle.Wait()
	}
}

func (q *queue) close() {
	q.mu.Lock()
	if !q.closed {
		q.closed = true
		close(q.done)
	}
	q.cond.Broadcast()
	q.mu.Unlock()
}

// waiting reports whether chunks wait for a worker.
func (q *queue) waiting() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.h) > 0
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
