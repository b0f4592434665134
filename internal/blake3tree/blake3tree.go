// Package blake3tree computes the standard BLAKE3 hash of a file from
// ranges hashed independently, in any order and on any goroutine.
//
// BLAKE3 is a binary tree over 1 KiB chunks. A range that starts at a
// multiple of its own power-of-two size (in chunks) is a complete subtree,
// so a download worker can hash the range it fetched as the bytes pass
// through its buffer, and the file's hash is assembled from the ranges'
// subtree roots at the end: no read-back, no ordering between workers. The
// result is bit-identical to a sequential BLAKE3 (b3sum, zeebo/blake3).
//
// It builds on lukechampine.com/blake3/guts, which exposes the compression
// of chunks at any counter (with AVX-512 and AVX2 code) that sequential
// hashing libraries keep internal.
package blake3tree

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/bits"

	"lukechampine.com/blake3/guts"
)

// ChunkSize is the size of a BLAKE3 chunk, the leaf of the tree.
const ChunkSize = guts.ChunkSize

// groupSize is the most that one call of the SIMD compressor takes: 16
// chunks, a subtree of height 4.
const (
	groupSize   = guts.MaxSIMD * guts.ChunkSize
	groupHeight = 4
)

// Node is the root of a hashed range, not yet compressed: the file's root
// needs the ROOT flag, which only the last combining step can set.
type Node struct {
	n guts.Node
}

// Digest returns the hex of the node's chaining value: two ranges of the
// same offset and size have equal digests exactly when their bytes are
// equal (up to BLAKE3's collision resistance). A range that is not a
// file's last one is identified this way before the file is complete.
func (n Node) Digest() string {
	var b [32]byte
	for i, w := range guts.ChainingValue(n.n) {
		binary.LittleEndian.PutUint32(b[4*i:], w)
	}
	return hex.EncodeToString(b[:])
}

// RangeSize returns the largest valid range size not above want: a power
// of two number of chunks, at least one chunk. Ranges of this size at
// multiples of it are complete subtrees.
func RangeSize(want int64) int64 {
	if want < ChunkSize {
		return ChunkSize
	}
	return int64(1) << (bits.Len64(uint64(want)) - 1)
}

// Range hashes the bytes of one range of a file, written in order. Its
// zero value is not usable: use NewRange.
type Range struct {
	counter uint64 // chunk index of the range's first byte in the file
	groups  uint64 // full 16-chunk groups hashed; bit i set = stack[i] used
	stack   [64 - groupHeight][8]uint32
	buf     [groupSize]byte
	buflen  int
	total   int64
}

// NewRange returns a hasher for the range that starts at byte off of a
// file. off must be a multiple of the range size, which must come from
// RangeSize, except for a file's last range, which may be shorter.
func NewRange(off int64) (*Range, error) {
	if off < 0 || off%ChunkSize != 0 {
		return nil, fmt.Errorf("blake3tree: range offset %d is not a multiple of %d", off, ChunkSize)
	}
	return &Range{counter: uint64(off / ChunkSize)}, nil
}

// Reset makes r hash a new range from byte off, as NewRange would.
func (r *Range) Reset(off int64) error {
	if off < 0 || off%ChunkSize != 0 {
		return fmt.Errorf("blake3tree: range offset %d is not a multiple of %d", off, ChunkSize)
	}
	r.counter, r.groups, r.buflen, r.total = uint64(off/ChunkSize), 0, 0, 0
	return nil
}

// Len returns the number of bytes written.
func (r *Range) Len() int64 { return r.total }

// Write adds p to the range. It never fails. Full groups are compressed
// straight from p; only a group split across writes is copied.
func (r *Range) Write(p []byte) (int, error) {
	n := len(p)
	r.total += int64(n)
	for len(p) > 0 {
		if r.buflen == groupSize {
			// More data follows, so the buffered group is not the range's
			// last and can be folded into the stack.
			r.push(guts.CompressBuffer(&r.buf, groupSize, &guts.IV, r.next(), 0))
			r.buflen = 0
		}
		if r.buflen == 0 && len(p) > groupSize {
			r.push(guts.CompressBuffer((*[groupSize]byte)(p), groupSize, &guts.IV, r.next(), 0))
			p = p[groupSize:]
			continue
		}
		c := copy(r.buf[r.buflen:], p)
		r.buflen += c
		p = p[c:]
	}
	return n, nil
}

// next is the chunk counter of the next full group.
func (r *Range) next() uint64 { return r.counter + r.groups*guts.MaxSIMD }

// push adds a full group's root to the stack of complete subtrees,
// merging equal heights as BLAKE3's incremental hasher does.
func (r *Range) push(n guts.Node) {
	cv := guts.ChainingValue(n)
	i := 0
	for r.groups&(1<<i) != 0 {
		cv = guts.ChainingValue(guts.ParentNode(r.stack[i], cv, &guts.IV, 0))
		i++
	}
	r.stack[i] = cv
	r.groups++
}

// Node returns the root of the range's subtree. r may not be written to
// afterwards without a Reset.
func (r *Range) Node() Node {
	// The buffered tail (1 to 16 chunks, or nothing for an empty file) is
	// the rightmost subtree; fold the stack into it from the right.
	if r.buflen == 0 {
		// Only an empty range has nothing buffered (Write keeps the last
		// full group): the one empty chunk of an empty file.
		return Node{guts.CompressChunk(nil, &guts.IV, r.counter, 0)}
	}
	n := guts.CompressBuffer(&r.buf, r.buflen, &guts.IV, r.next(), 0)
	for i := 0; i < len(r.stack); i++ {
		if r.groups&(1<<i) != 0 {
			n = guts.ParentNode(r.stack[i], guts.ChainingValue(n), &guts.IV, 0)
		}
	}
	return Node{n}
}

// Sum returns the hex BLAKE3 of a file from the nodes of its ranges in
// file order, each of RangeSize size but the last. A file of one range
// needs just that range's node.
func Sum(ranges []Node) (string, error) {
	if len(ranges) == 0 {
		return "", fmt.Errorf("blake3tree: no ranges")
	}
	// Every range but the last is a complete subtree of the same height;
	// fold them left to right as the incremental hasher does, then merge
	// the stack into the last range from the right.
	var stack [64][8]uint32
	var count uint64
	for _, rn := range ranges[:len(ranges)-1] {
		cv := guts.ChainingValue(rn.n)
		i := 0
		for count&(1<<i) != 0 {
			cv = guts.ChainingValue(guts.ParentNode(stack[i], cv, &guts.IV, 0))
			i++
		}
		stack[i] = cv
		count++
	}
	n := ranges[len(ranges)-1].n
	for i := 0; i < 64; i++ {
		if count&(1<<i) != 0 {
			n = guts.ParentNode(stack[i], guts.ChainingValue(n), &guts.IV, 0)
		}
	}
	n.Flags |= guts.FlagRoot
	out := guts.WordsToBytes(guts.CompressNode(n))
	return hex.EncodeToString(out[:32]), nil
}
