package blake3tree

import "unsafe"

// groupHasher computes the chaining value of full 16-chunk groups with the
// AVX2 kernel: the chunks eight at a time, then the four levels of parents
// above them eight at a time.
type groupHasher struct {
	scratch [32][8]uint32
	// cvs holds one level of the tree, 16 chaining values; lanes past the
	// level's width read the zeros or stale values after it, which no
	// result depends on.
	cvs [2][16][8]uint32
}

var (
	chunkFlags  = [3]uint32{0, flagChunkStart, flagChunkEnd}
	parentFlags = [3]uint32{flagParent, 0, 0}
)

// cv returns the chaining value of the 16 chunks in p, the first at chunk
// counter.
func (g *groupHasher) cv(p *[groupSize]byte, counter uint64) [8]uint32 {
	for half := range 2 {
		var ctr [16]uint32
		for i := range 8 {
			c := counter + uint64(8*half+i)
			ctr[i], ctr[8+i] = uint32(c), uint32(c>>32)
		}
		out := (*[8][8]uint32)(g.cvs[0][8*half:])
		hash8(out, &p[8*half*ChunkSize], ChunkSize, ChunkSize/blockSize, &ctr, &chunkFlags, &g.scratch)
	}
	var zero [16]uint32
	src, dst := 0, 1
	for range groupHeight {
		out := (*[8][8]uint32)(g.cvs[dst][:8])
		hash8(out, (*byte)(unsafe.Pointer(&g.cvs[src][0][0])), 64, 1, &zero, &parentFlags, &g.scratch)
		src, dst = dst, src
	}
	return g.cvs[src][0]
}
