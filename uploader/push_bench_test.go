package uploader_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/ferrylabs/ferry/agent/detect"
	"github.com/ferrylabs/ferry/internal/s3test"
	"github.com/ferrylabs/ferry/uploader"
)

// Push benchmark data set: benchPushFiles files of benchPushSize, in page
// cache: three 64 MiB parts each, so the multipart path is measured, and
// one iteration stays near a second on a 2-core machine.
const (
	benchPushFiles = 2
	benchPushSize  = 192 << 20
)

// BenchmarkPush is `ferry push` of a small checkpoint at default settings
// (64 MiB parts, 16 requests in flight) against a real versitygw on
// loopback: hashing pass, part streaming and manifest commit, each
// iteration to a new step. Run it with -cpuprofile to see where a push's
// client CPU goes (`make bench-go`).
func BenchmarkPush(b *testing.B) {
	srv := s3test.Start(b)
	st := srv.Store(b, srv.NewBucket(b))
	dir := b.TempDir()
	data := benchData(benchPushSize)
	for i := range benchPushFiles {
		data[0] = byte(i) // distinct files, one random buffer
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("rank-%d.pt", i)), data, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	s, _, err := detect.Gather([]string{dir}, nil)
	if err != nil {
		b.Fatal(err)
	}
	dest := uploader.Destination{Store: st, Location: "s3://bench/push", Prefix: "push"}
	ctx := context.Background()
	b.SetBytes(benchPushFiles * benchPushSize)
	step := int64(0)
	for b.Loop() {
		step++
		s.Number = step
		_, err := dest.Push(ctx, s, uploader.PushOptions{
			Upload: uploader.Options{PartSize: uploader.DefaultPartSize, Concurrency: uploader.DefaultConcurrency}})
		if err != nil {
			b.Fatal(err)
		}
		// The server's copy is not part of the next iteration: drop it so
		// the disk does not fill over long runs.
		b.StopTimer()
		removeSteps(b, srv.Dir)
		b.StartTimer()
	}
}

// benchData returns size random bytes. The benchmarks' CPU profiles cover
// their setup too, so it is made once and kept small.
func benchData(size int) []byte {
	var key [32]byte
	binary.LittleEndian.PutUint64(key[:], uint64(size))
	data := make([]byte, size)
	_, _ = rand.NewChaCha8(key).Read(data)
	return data
}

// removeSteps deletes the data objects of every bucket on the server
// straight from its directory, keeping the buckets.
func removeSteps(b *testing.B, root string) {
	b.Helper()
	buckets, err := os.ReadDir(root)
	if err != nil {
		b.Fatal(err)
	}
	for _, bk := range buckets {
		entries, _ := os.ReadDir(filepath.Join(root, bk.Name()))
		for _, e := range entries {
			if e.Name()[0] != '.' {
				_ = os.RemoveAll(filepath.Join(root, bk.Name(), e.Name()))
			}
		}
	}
}
