package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
)

// The "ready" read: right after a restore exits, every restored file is
// read once to its end, as a trainer's torch.load would, so that a restore
// which returns before its bytes are usable is charged for the rest.
const (
	readyReaders = 8       // files read at once
	readyBuf     = 1 << 20 // each reader's buffer
)

// dropCachesPath is where the kernel takes a request to empty the page
// cache ("3": page cache, dentries and inodes).
const dropCachesPath = "/proc/sys/vm/drop_caches"

// dropCaches writes back dirty pages and empties the page cache, so that
// what follows starts cold: the server reads its objects from disk and
// nothing restored before is cached. It needs root and a writable
// /proc/sys.
func dropCaches() error {
	syscall.Sync()
	if err := os.WriteFile(dropCachesPath, []byte("3"), 0o644); err != nil {
		return fmt.Errorf("drop page cache: %w", err)
	}
	return nil
}

// coldStart drops the page cache before a restore. When it cannot, it
// says so once in the report and the restores go on with a warm cache.
func (b *bench) coldStart() {
	if b.dropFailed {
		return
	}
	if err := dropCaches(); err != nil {
		b.dropFailed, b.rep.ColdRestores = true, false
		b.rep.note("restore: the page cache could not be dropped (%v); restores and their ready times ran with whatever was cached", err)
		return
	}
	b.rep.ColdRestores = true
}

// readFiles reads every file in paths once to its end, readyReaders files
// at a time, each reader with its own readyBuf buffer and plain reads, and
// returns how long that took.
func readFiles(ctx context.Context, paths []string) (time.Duration, error) {
	start := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	next := make(chan string)
	g.Go(func() error {
		defer close(next)
		for _, p := range paths {
			select {
			case next <- p:
			case <-gctx.Done():
				return gctx.Err()
			}
		}
		return nil
	})
	for range min(readyReaders, len(paths)) {
		g.Go(func() error {
			buf := make([]byte, readyBuf)
			for p := range next {
				if err := readFile(p, buf); err != nil {
					return err
				}
			}
			return nil
		})
	}
	err := g.Wait()
	return time.Since(start), err
}

// readFile reads path to its end through buf.
func readFile(path string, buf []byte) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("read restored file: %w", err)
	}
	defer f.Close()
	for {
		_, err := f.Read(buf)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read restored file %s: %w", path, err)
		}
	}
}
