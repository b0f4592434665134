package restore

import (
	"testing"
	"time"

	"github.com/ferrylabs/ferry/manifest"
)

// The queue serves files in plan order but puts at most maxWriters workers
// on one file while another has chunks waiting; once every file has
// maxWriters, the first file gets more, so no worker idles.
func TestQueueSpreadsWritersOverFiles(t *testing.T) {
	q := newQueue()
	var ts []*transfer
	for seq := range 3 {
		job := &fileJob{file: manifest.File{Path: "f", Size: 10 * 1024}}
		tr := newTransfer(job, seq, nil, 1024, 0)
		ts = append(ts, tr)
		q.push(tr)
	}
	got := func() (int, int) {
		tr, i, ok := q.pop()
		if !ok {
			t.Fatal("queue closed")
		}
		return tr.seq, i
	}
	want := [][2]int{}
	for seq := range 3 {
		for i := range maxWriters {
			want = append(want, [2]int{seq, i})
		}
	}
	want = append(want, [2]int{0, maxWriters}) // every file is at the limit
	for _, w := range want {
		if seq, i := got(); seq != w[0] || i != w[1] {
			t.Fatalf("pop gave file %d chunk %d, want file %d chunk %d", seq, i, w[0], w[1])
		}
	}
	// A chunk of file 1 ends: file 0 is over the limit, so file 1 is next.
	q.finish(ts[1])
	if seq, i := got(); seq != 1 || i != maxWriters {
		t.Fatalf("after a chunk of file 1 ended, pop gave file %d chunk %d, want file 1 chunk %d", seq, i, maxWriters)
	}
	// File 0's chunks end: it is the first file again.
	for range maxWriters + 1 {
		q.finish(ts[0])
	}
	if seq, i := got(); seq != 0 || i != maxWriters+1 {
		t.Fatalf("after file 0's chunks ended, pop gave file %d chunk %d, want file 0 chunk %d", seq, i, maxWriters+1)
	}
	q.close()
	if _, _, ok := q.pop(); ok {
		t.Fatal("pop after close handed out a chunk")
	}
}

// drop withdraws a file's waiting chunks and returns only once every chunk
// a worker holds has finished: after it nobody writes to the file.
func TestQueueDropWaitsForWorkers(t *testing.T) {
	q := newQueue()
	tr := newTransfer(&fileJob{file: manifest.File{Path: "f", Size: 4 * 1024}}, 0, nil, 1024, 0)
	q.push(tr)
	for range 2 {
		if _, _, ok := q.pop(); !ok {
			t.Fatal("queue closed")
		}
	}
	dropped := make(chan struct{})
	go func() { q.drop(tr); close(dropped) }()
	q.finish(tr)
	select {
	case <-dropped:
		t.Fatal("drop returned while a worker still held a chunk")
	case <-time.After(50 * time.Millisecond):
	}
	q.finish(tr)
	select {
	case <-dropped:
	case <-time.After(10 * time.Second):
		t.Fatal("drop did not return after the last chunk finished")
	}
	if len(q.h) != 0 {
		t.Fatalf("%d files still queued after drop; the dropped file's 2 waiting chunks must be withdrawn", len(q.h))
	}
}
