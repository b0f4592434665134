package blake3tree

import (
	"math/rand"
	"testing"

	"lukechampine.com/blake3/guts"
)

// hash8 gives each of eight chunks the chaining value guts computes for it,
// at counters that cross a 32-bit boundary.
func TestHash8Chunks(t *testing.T) {
	if !haveHash8 {
		t.Skip("no AVX2")
	}
	buf := make([]byte, 8*ChunkSize)
	rand.New(rand.NewSource(1)).Read(buf)
	for _, base := range []uint64{0, 8, 1<<32 - 3} {
		var ctr [16]uint32
		for i := range 8 {
			c := base + uint64(i)
			ctr[i], ctr[8+i] = uint32(c), uint32(c>>32)
		}
		var out [8][8]uint32
		var sc [32][8]uint32
		hash8(&out, &buf[0], ChunkSize, ChunkSize/64, &ctr, &[3]uint32{0, guts.FlagChunkStart, guts.FlagChunkEnd}, &sc)
		for i := range 8 {
			want := guts.ChainingValue(guts.CompressChunk(buf[i*ChunkSize:(i+1)*ChunkSize], &guts.IV, base+uint64(i), 0))
			if out[i] != want {
				t.Fatalf("counter %d, chunk %d: got %x, want %x", base, i, out[i], want)
			}
		}
	}
}

// A group's chaining value from the kernel equals guts's.
func TestGroupCV(t *testing.T) {
	if !haveHash8 {
		t.Skip("no AVX2")
	}
	var buf [groupSize]byte
	rand.New(rand.NewSource(2)).Read(buf[:])
	var g groupHasher
	for _, c := range []uint64{0, 16, 1<<32 - 5} {
		want := guts.ChainingValue(guts.CompressBuffer(&buf, groupSize, &guts.IV, c, 0))
		if got := g.cv(&buf, c); got != want {
			t.Fatalf("counter %d: got %x, want %x", c, got, want)
		}
	}
}

func BenchmarkGroupHash8(b *testing.B) {
	if !haveHash8 {
		b.Skip("no AVX2")
	}
	var buf [groupSize]byte
	var g groupHasher
	b.SetBytes(groupSize)
	for b.Loop() {
		g.cv(&buf, 0)
	}
}

func BenchmarkGroupGuts(b *testing.B) {
	var buf [groupSize]byte
	b.SetBytes(groupSize)
	for b.Loop() {
		guts.ChainingValue(guts.CompressBuffer(&buf, groupSize, &guts.IV, 0, 0))
	}
}
