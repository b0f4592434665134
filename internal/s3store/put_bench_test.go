package s3store_test

import (
	"context"
	"encoding/binary"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/ferrylabs/ferry/internal/s3test"
	"github.com/ferrylabs/ferry/internal/store"
)

// benchPart is the default part (and restore chunk) size.
const benchPart = 64 << 20

// benchPartFile writes one part of random bytes to a file and returns it
// open, with its CRC32C: parts are streamed from a file, as the uploader
// streams them, not from memory.
func benchPartFile(b *testing.B) (*os.File, string) {
	b.Helper()
	var key [32]byte
	binary.LittleEndian.PutUint64(key[:], 42)
	data := make([]byte, benchPart)
	_, _ = rand.NewChaCha8(key).Read(data)
	path := filepath.Join(b.TempDir(), "part.bin")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		b.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.Close() })
	return f, store.CRC32C(data)
}

// BenchmarkUploadPart streams 64 MiB parts from a file in page cache to a
// real versitygw on loopback (UNSIGNED-PAYLOAD, CRC32C header), one request
// at a time ("serial") and with 8 in flight ("parallel"). Server CPU is
// included in the machine's load but not in the benchmark's process.
func BenchmarkUploadPart(b *testing.B) {
	srv := s3test.Shared(b)
	st := srv.Store(b, srv.NewBucket(b))
	f, crc := benchPartFile(b)
	ctx := context.Background()
	id, err := st.CreateMultipart(ctx, "obj")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.AbortMultipart(ctx, "obj", id) })
	var n atomic.Int32
	part := func() error {
		// Part numbers wrap at the S3 limit; overwriting a part is allowed.
		num := n.Add(1)%store.MaxParts + 1
		_, err := st.UploadPart(ctx, "obj", id, num, io.NewSectionReader(f, 0, benchPart), benchPart, crc)
		return err
	}
	b.Run("serial", func(b *testing.B) {
		b.SetBytes(benchPart)
		for b.Loop() {
			if err := part(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.SetBytes(benchPart)
		b.SetParallelism(4) // 4 x GOMAXPROCS goroutines: 8 on 2 cores
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := part(); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// BenchmarkGetRange streams one 64 MiB ranged GET to io.Discard through a
// 1 MiB buffer, as a restore worker does before its WriteAt.
func BenchmarkGetRange(b *testing.B) {
	srv := s3test.Shared(b)
	st := srv.Store(b, srv.NewBucket(b))
	f, crc := benchPartFile(b)
	ctx := context.Background()
	if _, err := st.Put(ctx, "obj", io.NewSectionReader(f, 0, benchPart), benchPart, store.PutOptions{CRC32C: crc}); err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	b.SetBytes(benchPart)
	for b.Loop() {
		rc, err := st.Get(ctx, "obj", 0, benchPart)
		if err != nil {
			b.Fatal(err)
		}
		n, err := io.CopyBuffer(io.Discard, onlyReader{rc}, buf)
		rc.Close()
		if err != nil || n != benchPart {
			b.Fatalf("read %d bytes: %v", n, err)
		}
	}
}

// onlyReader hides WriterTo/ReaderFrom so that io.CopyBuffer uses the
// buffer, like restore's copy loop.
type onlyReader struct{ r io.Reader }

func (o onlyReader) Read(p []byte) (int, error) { return o.r.Read(p) }
