package copier

import (
	"math/bits"
	"sync"
)

// buffers hands out byte slices in power-of-two size classes and takes
// them back, so a copy's memory is the buffers in use rather than those
// the garbage collector has yet to find: a part buffer allocated per
// request let the heap reach twice the budget.
var buffers bufferPool

type bufferPool struct {
	classes [64]sync.Pool
}

// class is the size class of n bytes: the least c with 1<<c >= n.
func class(n int64) int { return bits.Len64(uint64(max(n, 1) - 1)) }

// classSize is the bytes a buffer of n bytes holds: its class's size.
func classSize(n int64) int64 { return 1 << class(n) }

// get returns a slice of n bytes, its contents undefined.
func (p *bufferPool) get(n int64) []byte {
	c := class(n)
	if v, ok := p.classes[c].Get().(*[]byte); ok {
		return (*v)[:n]
	}
	return make([]byte, n, 1<<c)
}

// put returns a slice from get for reuse.
func (p *bufferPool) put(b []byte) {
	c := class(int64(cap(b)))
	if int64(cap(b)) == 1<<c {
		p.classes[c].Put(&b)
	}
}
