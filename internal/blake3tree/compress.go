package blake3tree

// The BLAKE3 compression function and the tree's node arithmetic, in
// portable Go: what the AVX2 kernel (hash8) does not cover (partial
// groups, parents on the stack, the root) and everything on machines
// without it. compressNode is the reference function of the BLAKE3
// specification with its seven rounds and message permutations unrolled,
// as in lukechampine.com/blake3/guts (MIT License, Copyright (c) 2020
// Luke Champine), which this package used before; zeebo/blake3 keeps its
// own internal.

import (
	"encoding/binary"
	"math/bits"
)

// Flags and sizes of the BLAKE3 specification.
const (
	flagChunkStart = 1 << 0
	flagChunkEnd   = 1 << 1
	flagParent     = 1 << 2
	flagRoot       = 1 << 3

	blockSize = 64
	// groupChunks is the most chunks one group holds: 16, a subtree of
	// height 4.
	groupChunks = 16
)

// iv is the BLAKE3 initialization vector (the key of unkeyed hashing).
var iv = [8]uint32{
	0x6A09E667, 0xBB67AE85, 0x3C6EF372, 0xA54FF53A,
	0x510E527F, 0x9B05688C, 0x1F83D9AB, 0x5BE0CD19,
}

// node is a chunk's last block or a parent, not yet compressed: the root
// needs flagRoot, which only the last combining step can set.
type node struct {
	cv       [8]uint32
	block    [16]uint32
	counter  uint64
	blockLen uint32
	flags    uint32
}

// parentNode is the parent of two subtrees' chaining values.
func parentNode(left, right [8]uint32) node {
	n := node{cv: iv, blockLen: blockSize, flags: flagParent}
	copy(n.block[:8], left[:])
	copy(n.block[8:], right[:])
	return n
}

// chainingValue compresses n and returns the first 8 output words.
func chainingValue(n node) [8]uint32 {
	full := compressNode(n)
	return [8]uint32(full[:8])
}

// compressChunk compresses every block of one chunk (at most ChunkSize
// bytes, at chunk index counter) but the last, and returns the last's node.
func compressChunk(chunk []byte, counter uint64) node {
	n := node{cv: iv, counter: counter, blockLen: blockSize, flags: flagChunkStart}
	for len(chunk) > blockSize {
		n.block = wordsOf(chunk[:blockSize])
		chunk = chunk[blockSize:]
		n.cv = chainingValue(n)
		n.flags &^= flagChunkStart
	}
	var last [blockSize]byte
	n.blockLen = uint32(copy(last[:], chunk))
	n.block = wordsOf(last[:])
	n.flags |= flagChunkEnd
	return n
}

// compressGroup returns the root node of the subtree of up to 16 chunks in
// p[:n], the first at chunk index counter.
func compressGroup(p *[groupSize]byte, n int, counter uint64) node {
	if n <= ChunkSize {
		return compressChunk(p[:n], counter)
	}
	var cvs [groupChunks][8]uint32
	k := 0
	for off := 0; off < n; off += ChunkSize {
		cvs[k] = chainingValue(compressChunk(p[off:min(off+ChunkSize, n)], counter+uint64(k)))
		k++
	}
	// Pair left to right; an odd one out moves up a level as it is, as
	// BLAKE3's left-full tree wants.
	for k > 2 {
		half := k / 2
		for i := range half {
			cvs[i] = chainingValue(parentNode(cvs[2*i], cvs[2*i+1]))
		}
		if k%2 != 0 {
			cvs[half] = cvs[k-1]
			half++
		}
		k = half
	}
	return parentNode(cvs[0], cvs[1])
}

func wordsOf(b []byte) (w [16]uint32) {
	for i := range w {
		w[i] = binary.LittleEndian.Uint32(b[4*i:])
	}
	return w
}

// g is BLAKE3's quarter round.
func g(a, b, c, d, mx, my uint32) (uint32, uint32, uint32, uint32) {
	a += b + mx
	d = bits.RotateLeft32(d^a, -16)
	c += d
	b = bits.RotateLeft32(b^c, -12)
	a += b + my
	d = bits.RotateLeft32(d^a, -8)
	c += d
	b = bits.RotateLeft32(b^c, -7)
	return a, b, c, d
}

// compressNode compresses a node into its 16-word output: seven rounds,
// each a column and a diagonal step, the message words permuted between
// rounds (unrolled here).
func compressNode(n node) [16]uint32 {
	m := &n.block
	s0, s4, s8, s12 := g(n.cv[0], n.cv[4], iv[0], uint32(n.counter), m[0], m[1])
	s1, s5, s9, s13 := g(n.cv[1], n.cv[5], iv[1], uint32(n.counter>>32), m[2], m[3])
	s2, s6, s10, s14 := g(n.cv[2], n.cv[6], iv[2], n.blockLen, m[4], m[5])
	s3, s7, s11, s15 := g(n.cv[3], n.cv[7], iv[3], n.flags, m[6], m[7])
	s0, s5, s10, s15 = g(s0, s5, s10, s15, m[8], m[9])
	s1, s6, s11, s12 = g(s1, s6, s11, s12, m[10], m[11])
	s2, s7, s8, s13 = g(s2, s7, s8, s13, m[12], m[13])
	s3, s4, s9, s14 = g(s3, s4, s9, s14, m[14], m[15])

	s0, s4, s8, s12 = g(s0, s4, s8, s12, m[2], m[6])
	s1, s5, s9, s13 = g(s1, s5, s9, s13, m[3], m[10])
	s2, s6, s10, s14 = g(s2, s6, s10, s14, m[7], m[0])
	s3, s7, s11, s15 = g(s3, s7, s11, s15, m[4], m[13])
	s0, s5, s10, s15 = g(s0, s5, s10, s15, m[1], m[11])
	s1, s6, s11, s12 = g(s1, s6, s11, s12, m[12], m[5])
	s2, s7, s8, s13 = g(s2, s7, s8, s13, m[9], m[14])
	s3, s4, s9, s14 = g(s3, s4, s9, s14, m[15], m[8])

	s0, s4, s8, s12 = g(s0, s4, s8, s12, m[3], m[4])
	s1, s5, s9, s13 = g(s1, s5, s9, s13, m[10], m[12])
	s2, s6, s10, s14 = g(s2, s6, s10, s14, m[13], m[2])
	s3, s7, s11, s15 = g(s3, s7, s11, s15, m[7], m[14])
	s0, s5, s10, s15 = g(s0, s5, s10, s15, m[6], m[5])
	s1, s6, s11, s12 = g(s1, s6, s11, s12, m[9], m[0])
	s2, s7, s8, s13 = g(s2, s7, s8, s13, m[11], m[15])
	s3, s4, s9, s14 = g(s3, s4, s9, s14, m[8], m[1])

	s0, s4, s8, s12 = g(s0, s4, s8, s12, m[10], m[7])
	s1, s5, s9, s13 = g(s1, s5, s9, s13, m[12], m[9])
	s2, s6, s10, s14 = g(s2, s6, s10, s14, m[14], m[3])
	s3, s7, s11, s15 = g(s3, s7, s11, s15, m[13], m[15])
	s0, s5, s10, s15 = g(s0, s5, s10, s15, m[4], m[0])
	s1, s6, s11, s12 = g(s1, s6, s11, s12, m[11], m[2])
	s2, s7, s8, s13 = g(s2, s7, s8, s13, m[5], m[8])
	s3, s4, s9, s14 = g(s3, s4, s9, s14, m[1], m[6])

	s0, s4, s8, s12 = g(s0, s4, s8, s12, m[12], m[13])
	s1, s5, s9, s13 = g(s1, s5, s9, s13, m[9], m[11])
	s2, s6, s10, s14 = g(s2, s6, s10, s14, m[15], m[10])
	s3, s7, s11, s15 = g(s3, s7, s11, s15, m[14], m[8])
	s0, s5, s10, s15 = g(s0, s5, s10, s15, m[7], m[2])
	s1, s6, s11, s12 = g(s1, s6, s11, s12, m[5], m[3])
	s2, s7, s8, s13 = g(s2, s7, s8, s13, m[0], m[1])
	s3, s4, s9, s14 = g(s3, s4, s9, s14, m[6], m[4])

	s0, s4, s8, s12 = g(s0, s4, s8, s12, m[9], m[14])
	s1, s5, s9, s13 = g(s1, s5, s9, s13, m[11], m[5])
	s2, s6, s10, s14 = g(s2, s6, s10, s14, m[8], m[12])
	s3, s7, s11, s15 = g(s3, s7, s11, s15, m[15], m[1])
	s0, s5, s10, s15 = g(s0, s5, s10, s15, m[13], m[3])
	s1, s6, s11, s12 = g(s1, s6, s11, s12, m[0], m[10])
	s2, s7, s8, s13 = g(s2, s7, s8, s13, m[2], m[6])
	s3, s4, s9, s14 = g(s3, s4, s9, s14, m[4], m[7])

	s0, s4, s8, s12 = g(s0, s4, s8, s12, m[11], m[15])
	s1, s5, s9, s13 = g(s1, s5, s9, s13, m[5], m[0])
	s2, s6, s10, s14 = g(s2, s6, s10, s14, m[1], m[9])
	s3, s7, s11, s15 = g(s3, s7, s11, s15, m[8], m[6])
	s0, s5, s10, s15 = g(s0, s5, s10, s15, m[14], m[10])
	s1, s6, s11, s12 = g(s1, s6, s11, s12, m[2], m[12])
	s2, s7, s8, s13 = g(s2, s7, s8, s13, m[3], m[4])
	s3, s4, s9, s14 = g(s3, s4, s9, s14, m[7], m[13])

	return [16]uint32{
		s0 ^ s8, s1 ^ s9, s2 ^ s10, s3 ^ s11,
		s4 ^ s12, s5 ^ s13, s6 ^ s14, s7 ^ s15,
		s8 ^ n.cv[0], s9 ^ n.cv[1], s10 ^ n.cv[2], s11 ^ n.cv[3],
		s12 ^ n.cv[4], s13 ^ n.cv[5], s14 ^ n.cv[6], s15 ^ n.cv[7],
	}
}
