package blake3tree

import (
	"bytes"
	"encoding/hex"
	"math/rand/v2"
	"testing"

	"github.com/zeebo/blake3"
)

func reference(data []byte) string {
	sum := blake3.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// sumRanges hashes data as ranges of size rs, each fed in writes of the
// given size, in reverse order so nothing depends on order.
func sumRanges(t *testing.T, data []byte, rs int64, write int) string {
	t.Helper()
	n := (int64(len(data)) + rs - 1) / rs
	if n == 0 {
		n = 1
	}
	nodes := make([]Node, n)
	for i := n - 1; i >= 0; i-- {
		off := i * rs
		r, err := NewRange(off)
		if err != nil {
			t.Fatal(err)
		}
		part := data[off:min(off+rs, int64(len(data)))]
		for len(part) > 0 {
			w := min(write, len(part))
			r.Write(part[:w])
			part = part[w:]
		}
		if r.Len() != min(rs, int64(len(data))-off) {
			t.Fatalf("Len %d", r.Len())
		}
		nodes[i] = r.Node()
	}
	sum, err := Sum(nodes)
	if err != nil {
		t.Fatal(err)
	}
	return sum
}

// TestMatchesSequentialBLAKE3 compares against zeebo/blake3, an independent
// implementation, at sizes around every boundary the tree has: chunk,
// 16-chunk group, range, and odd counts of each.
func TestMatchesSequentialBLAKE3(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	data := make([]byte, 3<<20+12345)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	sizes := []int{0, 1, 63, 64, 65, 1023, 1024, 1025, 2048, 3 * 1024, 16<<10 - 1, 16 << 10, 16<<10 + 1,
		17 << 10, 31 << 10, 32 << 10, 33<<10 + 7, 64 << 10, 64<<10 + 1, 100 << 10, 1 << 20, 1<<20 + 1,
		3 << 20, len(data)}
	ranges := []int64{1024, 4096, 16 << 10, 32 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20}
	writes := []int{1, 1000, 16 << 10, 1 << 20}
	kernels := []bool{false}
	if haveHash8 {
		kernels = append(kernels, true) // the AVX2 kernel and the fallback
	}
	defer func(h bool) { haveHash8 = h }(haveHash8)
	for _, k := range kernels {
		haveHash8 = k
		matchSizes(t, data, sizes, ranges, writes)
	}
}

func matchSizes(t *testing.T, data []byte, sizes []int, ranges []int64, writes []int) {
	t.Helper()
	for _, size := range sizes {
		want := reference(data[:size])
		for _, rs := range ranges {
			for _, w := range writes {
				if w == 1 && size > 70<<10 {
					continue // byte-at-a-time is slow and adds nothing there
				}
				if got := sumRanges(t, data[:size], rs, w); got != want {
					t.Fatalf("AVX2 kernel %v, size %d, range %d, writes of %d: got %s, want %s", haveHash8, size, rs, w, got, want)
				}
			}
		}
	}
}

func TestReset(t *testing.T) {
	data := bytes.Repeat([]byte("ferry"), 50000)
	r, _ := NewRange(0)
	r.Write([]byte("something else entirely"))
	if err := r.Reset(0); err != nil {
		t.Fatal(err)
	}
	r.Write(data)
	got, _ := Sum([]Node{r.Node()})
	if want := reference(data); got != want {
		t.Fatalf("after Reset: got %s, want %s", got, want)
	}
}

func TestRangeSize(t *testing.T) {
	for _, c := range []struct{ in, want int64 }{
		{0, 1024}, {1, 1024}, {1024, 1024}, {1500, 1024}, {2048, 2048}, {64 << 20, 64 << 20}, {100 << 20, 64 << 20},
	} {
		if got := RangeSize(c.in); got != c.want {
			t.Errorf("RangeSize(%d) = %d, want %d", c.in, got, c.want)
		}
	}
}

func TestBadInput(t *testing.T) {
	if _, err := NewRange(1000); err == nil {
		t.Error("NewRange(1000) accepted an offset inside a chunk")
	}
	if _, err := NewRange(-1024); err == nil {
		t.Error("NewRange(-1024) accepted a negative offset")
	}
	if _, err := Sum(nil); err == nil {
		t.Error("Sum(nil) returned a hash")
	}
}

func BenchmarkRange(b *testing.B) {
	buf := make([]byte, 1<<20)
	b.SetBytes(int64(len(buf)))
	r, _ := NewRange(0)
	for b.Loop() {
		r.Write(buf)
	}
}

func BenchmarkZeebo(b *testing.B) {
	buf := make([]byte, 1<<20)
	b.SetBytes(int64(len(buf)))
	h := blake3.New()
	for b.Loop() {
		h.Write(buf)
	}
}
