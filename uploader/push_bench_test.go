package uploader_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/ferrylabs/ferry/internal/s3test"
	"github.com/ferrylabs/ferry/uploader"
)

// Push benchmark data set: benchPushFiles files of benchPushSize, in page
// cache. 4 x 64 MiB keeps one iteration near a second on a 2-core machine.
const (
	benchPushFiles = 4
	benchPushSize  = 64 << 20
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
	for i := range benchPushFiles {
		writeBenchFile(b, filepath.Join(dir, fmt.Sprintf("rank-%d.pt", i)), benchPushSize, uint64(i))
	}
	tree, err := uploader.Scan([]string{dir}, nil)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.SetBytes(benchPushFiles * benchPushSize)
	step := int64(0)
	for b.Loop() {
		step++
		_, err := uploader.Push(ctx, uploader.PushOptions{
			Upload:   uploader.Options{Store: st, PartSize: uploader.DefaultPartSize, Concurrency: uploader.DefaultConcurrency},
			Location: "s3://bench/push",
			Prefix:   "push",
			Step:     step,
			Tree:     tree,
		})
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

func writeBenchFile(b *testing.B, path string, size int64, seed uint64) {
	b.Helper()
	var key [32]byte
	binary.LittleEndian.PutUint64(key[:], seed)
	data := make([]byte, size)
	_, _ = rand.NewChaCha8(key).Read(data)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		b.Fatal(err)
	}
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
