package blake3tree

import (
	"math/rand"
	"testing"
)

// hash8 gives each of eight chunks the chaining value compress.go computes for it,
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
		hash8(&out, &buf[0], ChunkSize, ChunkSize/64, &ctr, &chunkFlags, &sc)
		for i := range 8 {
			want := chainingValue(compressChunk(buf[i*ChunkSize:(i+1)*ChunkSize], base+uint64(i)))
			if out[i] != want {
				t.Fatalf("counter %d, chunk %d: got %x, want %x", base, i, out[i], want)
			}
		}
	}
}

// A group's chaining value from the kernel equals compress.go's.
func TestGroupCV(t *testing.T) {
	if !haveHash8 {
		t.Skip("no AVX2")
	}
	var buf [groupSize]byte
	rand.New(rand.NewSource(2)).Read(buf[:])
	var g groupHasher
	for _, c := range []uint64{0, 16, 1<<32 - 5} {
		want := chainingValue(compressGroup(&buf, groupSize, c))
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

func BenchmarkGroupGeneric(b *testing.B) {
	var buf [groupSize]byte
	b.SetBytes(groupSize)
	for b.Loop() {
		chainingValue(compressGroup(&buf, groupSize, 0))
	}
}
