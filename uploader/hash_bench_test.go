package uploader

import (
	"context"
	"encoding/binary"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/zeebo/blake3"
)

// benchHashSize is the file hashed by the hashing benchmarks: large enough
// that per-call costs vanish, small enough to stay in page cache.
const benchHashSize = 256 << 20

// benchFile writes size random bytes to a file under b.TempDir and reads it
// once, so the benchmark measures hashing from page cache, as push does.
func benchFile(b *testing.B, size int64) string {
	b.Helper()
	path := filepath.Join(b.TempDir(), "ckpt.bin")
	var key [32]byte
	binary.LittleEndian.PutUint64(key[:], uint64(size))
	data := make([]byte, size)
	_, _ = rand.NewChaCha8(key).Read(data)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		b.Fatal(err)
	}
	return path
}

// BenchmarkHashPass is the first pass of a push over one file: ReadAt in
// readBufSize blocks into BLAKE3 and the per-part CRC32C (hashRange), and
// its parts, to show which one the pass spends its time on.
func BenchmarkHashPass(b *testing.B) {
	path := benchFile(b, benchHashSize)
	fh, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer fh.Close()
	u := New(Options{})
	ctx := context.Background()
	b.Run("blake3+crc32c", func(b *testing.B) {
		b.SetBytes(benchHashSize)
		for b.Loop() {
			var crc uint32
			h := blake3.New()
			if err := u.hashRange(ctx, fh, 0, benchHashSize, h, func(p []byte) { crc = crc32.Update(crc, castagnoli, p) }); err != nil {
				b.Fatal(err)
			}
			h.Sum(nil)
		}
	})
	b.Run("blake3", func(b *testing.B) {
		b.SetBytes(benchHashSize)
		for b.Loop() {
			if _, _, err := HashFile(ctx, path); err != nil {
				b.Fatal(err)
			}
		}
	})
	// The same reads with only the CRC32C, then with nothing: what the
	// pass would cost without BLAKE3.
	for _, withCRC := range []bool{true, false} {
		name := "read+crc32c"
		if !withCRC {
			name = "read"
		}
		b.Run(name, func(b *testing.B) {
			buf := make([]byte, readBufSize)
			b.SetBytes(benchHashSize)
			for b.Loop() {
				var crc uint32
				for off := int64(0); off < benchHashSize; off += readBufSize {
					n, err := fh.ReadAt(buf, off)
					if err != nil && err != io.EOF {
						b.Fatal(err)
					}
					if withCRC {
						crc = crc32.Update(crc, castagnoli, buf[:n])
					}
				}
			}
		})
	}
}

// BenchmarkBLAKE3Block is BLAKE3 alone over a buffer in memory, by write
// size: the ceiling for any pass that hashes with zeebo/blake3.
func BenchmarkBLAKE3Block(b *testing.B) {
	for _, size := range []int{64 << 10, 1 << 20, 8 << 20} {
		buf := make([]byte, size)
		b.Run(byteSize(size), func(b *testing.B) {
			h := blake3.New()
			b.SetBytes(int64(size))
			for b.Loop() {
				h.Write(buf)
			}
		})
	}
}

func byteSize(n int) string {
	if n >= 1<<20 {
		return strconv.Itoa(n>>20) + "MiB"
	}
	return strconv.Itoa(n>>10) + "KiB"
}
