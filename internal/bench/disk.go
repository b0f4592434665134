package bench

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"
)

// diskResult is the local disk's speed for writes that are durable when
// they return: the data set's size written with direct I/O and fsynced.
// No restore that leaves its files on disk can be faster, whatever it
// does over the network; a restore into the page cache (the peers) can.
type diskResult struct {
	Bytes   int64   `json:"bytes"`
	Writers int     `json:"writers"`
	WallS   float64 `json:"median_wall_s"`
	MiBps   float64 `json:"mib_per_s"`
	// FloorVsBestPeer is WallS over the fastest peer's median restore wall
	// time: the lowest restore ratio a durable restore can reach here.
	FloorVsBestPeer *float64 `json:"floor_vs_best_peer_restore,omitempty"`
}

// diskWriters is how many files are written at once, like a restore's
// files in flight.
const diskWriters = 4

// diskPhase times direct, fsynced writes of the data set's size in the
// scratch area (where restores write), median of 3, before the restores.
func (b *bench) diskPhase(ctx context.Context) error {
	total := int64(b.cfg.files) * b.cfg.size
	dir := filepath.Join(b.work, "disk")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	var walls []float64
	for round := range 3 {
		settle()
		start := time.Now()
		g, _ := errgroup.WithContext(ctx)
		for w := range diskWriters {
			path := filepath.Join(dir, fmt.Sprintf("w%d-%d", round, w))
			g.Go(func() error { return writeDirect(path, total/diskWriters) })
		}
		if err := g.Wait(); err != nil {
			b.rep.note("disk: direct writes failed (%v); no floor measured", err)
			return nil
		}
		walls = append(walls, time.Since(start).Seconds())
		for w := range diskWriters {
			os.Remove(filepath.Join(dir, fmt.Sprintf("w%d-%d", round, w)))
		}
	}
	d := &diskResult{Bytes: total, Writers: diskWriters, WallS: median(walls)}
	d.MiBps = mibps(total, d.WallS)
	b.rep.Disk = d
	log.Printf("disk: %s written direct + fsync in %.2f s (%.0f MiB/s)", fmtSize(total), d.WallS, d.MiBps)
	return nil
}

// writeDirect writes n bytes (rounded down to MiB) to a new file with
// O_DIRECT in 1 MiB writes, as ferry restore does, then fsyncs it.
func writeDirect(path string, n int64) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|unix.O_DIRECT, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	const bs = 1 << 20
	buf, err := unix.Mmap(-1, 0, bs, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return err
	}
	defer unix.Munmap(buf)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	for off := int64(0); off+bs <= n; off += bs {
		if _, err := f.WriteAt(buf, off); err != nil {
			return err
		}
	}
	return f.Sync()
}
