// Package trainsim simulates a training job's checkpoint writes for the
// demo and the tests: every rank writes its checkpoint file in place, in
// chunks with pauses (as torch.save does), and then repoints its
// latest-rank{R}.pt symlink, using Composer's names:
//
//	ep{E}-ba{B}-rank{R}.pt    (B is the step)
//	latest-rank{R}.pt -> ep{E}-ba{B}-rank{R}.pt
//
// File contents are a deterministic function of (seed, step, rank), so a
// test can recompute what a restored file must hold.
package trainsim

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sync/errgroup"
)

// Options describe the simulated job.
type Options struct {
	Dir      string
	Ranks    int
	Epoch    int
	FileSize int64
	// Chunk and Pause shape the writes: Chunk bytes, then Pause, repeated.
	Chunk int64
	Pause time.Duration
	Seed  int64
}

// FileName is the checkpoint file of a rank at a step.
func FileName(epoch int, step int64, rank int) string {
	return fmt.Sprintf("ep%d-ba%d-rank%d.pt", epoch, step, rank)
}

// LatestName is the symlink naming a rank's latest checkpoint.
func LatestName(rank int) string { return fmt.Sprintf("latest-rank%d.pt", rank) }

// Content returns the bytes a rank's checkpoint holds at a step.
func Content(seed, step int64, rank int, size int64) []byte {
	data := make([]byte, size)
	rand.New(rand.NewSource(seed*1_000_003 + step*131 + int64(rank))).Read(data)
	return data
}

// WriteStep writes every rank's checkpoint of one step concurrently, then
// repoints the latest symlinks. It stops early when ctx is cancelled,
// leaving partly written files, as a killed job does.
func WriteStep(ctx context.Context, o Options, step int64) error {
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return fmt.Errorf("create checkpoint dir: %w", err)
	}
	g, ctx := errgroup.WithContext(ctx)
	for r := 0; r < o.Ranks; r++ {
		g.Go(func() error { return writeRank(ctx, o, step, r) })
	}
	if err := g.Wait(); err != nil {
		return err
	}
	for r := 0; r < o.Ranks; r++ {
		link := filepath.Join(o.Dir, LatestName(r))
		tmp := link + ".tmp"
		os.Remove(tmp)
		if err := os.Symlink(FileName(o.Epoch, step, r), tmp); err != nil {
			return fmt.Errorf("link latest of rank %d: %w", r, err)
		}
		if err := os.Rename(tmp, link); err != nil {
			return fmt.Errorf("link latest of rank %d: %w", r, err)
		}
	}
	return nil
}

func writeRank(ctx context.Context, o Options, step int64, rank int) error {
	data := Content(o.Seed, step, rank, o.FileSize)
	f, err := os.Create(filepath.Join(o.Dir, FileName(o.Epoch, step, rank)))
	if err != nil {
		return fmt.Errorf("rank %d: %w", rank, err)
	}
	defer f.Close()
	chunk := o.Chunk
	if chunk <= 0 {
		chunk = int64(len(data))
	}
	for off := int64(0); off < int64(len(data)); off += chunk {
		end := min(off+chunk, int64(len(data)))
		if _, err := f.Write(data[off:end]); err != nil {
			return fmt.Errorf("rank %d: %w", rank, err)
		}
		if o.Pause > 0 && end < int64(len(data)) {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(o.Pause):
			}
		}
	}
	return f.Close()
}
