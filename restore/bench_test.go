package restore

import (
	"context"
	"testing"

	"github.com/ferrylabs/ferry/internal/store"
)

// BenchmarkRestoreLargeFile measures one large file through the ranged
// download, with each range hashed in the worker that fetched it and the
// tree combined at the end (from memory, so it shows the local cost:
// BLAKE3 of every range, the writes, fsync).
func BenchmarkRestoreLargeFile(b *testing.B) {
	const size = 256 << 20
	st := store.NewMemStore()
	commit(b, st, 1, []tfile{{path: "big.pt", data: randBytes(size, 1)}}, nil)
	b.SetBytes(size)
	for b.Loop() {
		dir := b.TempDir()
		if _, err := Restore(context.Background(), Options{Store: st, Prefix: testPrefix, Dir: dir, Step: 1, ChunkSize: 16 << 20}); err != nil {
			b.Fatal(err)
		}
	}
}
