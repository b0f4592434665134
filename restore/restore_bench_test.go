package restore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/ferrylabs/ferry/internal/s3test"
	"github.com/ferrylabs/ferry/internal/steptest"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/restore"
	"github.com/ferrylabs/ferry/uploader"
)

// Restore benchmark data set, as pushed by uploader.Destination.Push at defaults:
// six 32 MiB ranged GETs per file.
const (
	benchFiles = 2
	benchSize  = 192 << 20
)

// BenchmarkRestore is `ferry restore` of a small checkpoint at default
// settings (16 ranged GETs of 32 MiB in flight) from a real versitygw on
// loopback into an empty directory: download, BLAKE3 of every byte read
// back behind the download, fsync and rename. Run it with -cpuprofile to
// see where a restore's client CPU goes (`make bench-go`).
func BenchmarkRestore(b *testing.B) {
	srv := s3test.Shared(b)
	st := srv.Store(b, srv.NewBucket(b))
	src := b.TempDir()
	// One random buffer for every file (the first byte tells them apart):
	// the CPU profile covers this setup too.
	var key [32]byte
	data := make([]byte, benchSize)
	_, _ = rand.NewChaCha8(key).Read(data)
	for i := range benchFiles {
		data[0] = byte(i)
		if err := os.WriteFile(filepath.Join(src, fmt.Sprintf("rank-%d.pt", i)), data, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	pushDir(b, st, src, "restore")
	ctx := context.Background()
	parent := b.TempDir()
	b.SetBytes(benchFiles * benchSize)
	i := 0
	for b.Loop() {
		i++
		dir := filepath.Join(parent, fmt.Sprint(i))
		res, err := restore.Restore(ctx, restore.Options{Store: st, Prefix: "restore", Dir: dir, Step: restore.LatestStep})
		if err != nil {
			b.Fatal(err)
		}
		if res.Downloaded != benchFiles {
			b.Fatalf("downloaded %d files, want %d", res.Downloaded, benchFiles)
		}
		b.StopTimer()
		if err := os.RemoveAll(dir); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

// pushDir commits the files under src as step 1 under prefix.
func pushDir(b testing.TB, st store.Store, src, prefix string) {
	b.Helper()
	steptest.Push(b, st, prefix, src, 1, uploader.PushOptions{})
}
