package restore_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/internal/s3store"
	"github.com/ferrylabs/ferry/internal/s3test"
	"github.com/ferrylabs/ferry/internal/wanlink"
	"github.com/ferrylabs/ferry/restore"
)

// BenchmarkRestoreSmallWAN restores 1,000 x 256 KiB through toxiproxy at
// FERRY_BENCH_WAN (default 150ms,25MB): where the client's CPU goes when
// the pool grows with the round trip. Needs FERRY_TOXIPROXY (skipped
// without).
func BenchmarkRestoreSmallWAN(b *testing.B) {
	spec := os.Getenv("FERRY_BENCH_WAN")
	if spec == "" {
		spec = "150ms,25MB"
	}
	link, err := wanlink.Parse(spec)
	if err != nil {
		b.Fatal(err)
	}
	srv := s3test.Shared(b)
	_, endpoint := srv.ThroughLink(b, link)
	bucket := srv.NewBucket(b)
	st := srv.Store(b, bucket)
	src := b.TempDir()
	data := make([]byte, 256<<10)
	_, _ = rand.Read(data)
	for i := range 1000 {
		data[0], data[1] = byte(i), byte(i>>8)
		dir := filepath.Join(src, fmt.Sprintf("rank%d", i%8))
		_ = os.MkdirAll(dir, 0o755)
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("s%04d.bin", i)), data, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	pushDir(b, st, src, "r")
	ctx := context.Background()
	far := srv.StoreWith(b, s3store.Config{Bucket: bucket, Endpoint: endpoint, MaxConns: restore.DefaultConcurrency})
	parent := b.TempDir()
	i := 0
	for b.Loop() {
		i++
		start := time.Now()
		res, err := restore.Restore(ctx, restore.Options{Store: far, Prefix: "r", Dir: filepath.Join(parent, fmt.Sprint(i)), Step: restore.LatestStep})
		if err != nil || res.Downloaded != 1000 {
			b.Fatalf("restore: %+v, %v", res, err)
		}
		b.Logf("restore %d: %.2f s", i, time.Since(start).Seconds())
	}
}
