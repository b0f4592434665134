package restore

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sync/semaphore"
)

// The worker pool adapts to the link. On a fast, near store a few GETs in
// flight keep it busy and more only cost CPU (on a 2-core VM against a
// loopback server, 256 workers made a 2,000-file restore 1.15x s5cmd's
// wall where 16 made it 0.75x). Across the internet every GET waits a
// round trip before its first byte, and small files are all round trips:
// at 80 ms, 16 workers restored 1,000 x 256 KiB in 3.4x s5cmd's time. So
// the pool starts at baseWorkers and grows, up to Concurrency, in
// proportion to the smallest time to first byte it measures (the link's
// round trip), while chunks wait.
const (
	baseWorkers = 16
	// ttfbPerBase is the time to first byte that baseWorkers keep busy:
	// at n times it, n x baseWorkers are started.
	ttfbPerBase = 10 * time.Millisecond
	// adaptEvery is how often the pool is resized.
	adaptEvery = 50 * time.Millisecond
)

// ttfbMeter keeps the smallest time to first byte of the GETs so far:
// the round trip the link adds, without the queueing of a busy server or
// client, which more workers would only make worse.
type ttfbMeter struct {
	min     atomic.Int64 // nanoseconds
	samples atomic.Int64
	// seed is the round trip the manifest's reads took, set before the
	// download: the first data GETs need not wait for samples of their
	// own to be many enough across the internet.
	seed time.Duration
}

// minSamples is how many GETs are timed before the pool grows.
const minSamples = 8

func (m *ttfbMeter) observe(d time.Duration) {
	m.samples.Add(1)
	for {
		old := m.min.Load()
		if old > 0 && old <= int64(d) {
			return
		}
		if m.min.CompareAndSwap(old, max(int64(d), 1)) {
			return
		}
	}
}

// get returns the round trip measured, the seed (0 without one) before
// minSamples GETs.
func (m *ttfbMeter) get() time.Duration {
	if m.samples.Load() < minSamples {
		return m.seed
	}
	return time.Duration(m.min.Load())
}

// wantWorkers is the pool size for a measured time to first byte.
func wantWorkers(ttfb time.Duration, limit int) int {
	n := baseWorkers * int((ttfb+ttfbPerBase-1)/ttfbPerBase)
	return min(max(n, baseWorkers), limit)
}

// fileGate bounds the files being restored at once: 2 x baseWorkers, and
// one more for each worker the pool grows by (a small file is one GET, so a
// worker needs a file of its own). It holds the room for the growth
// reserved until the pool grows.
type fileGate struct {
	*semaphore.Weighted
	reserved int64
}

func newFileGate(concurrency int) *fileGate {
	base := min(baseWorkers, concurrency)
	reserved := int64(concurrency - base)
	g := &fileGate{Weighted: semaphore.NewWeighted(int64(2*base) + reserved), reserved: reserved}
	g.TryAcquire(reserved) // always granted: the gate is new and holds that much
	return g
}

// open lets n more files be restored at once.
func (g *fileGate) open(n int) {
	n64 := min(int64(n), g.reserved)
	g.reserved -= n64
	g.Release(n64)
}

// budget is the byte budget of the GETs in flight: base bytes, and, when it
// grows, up to budgetGrowth times that, held back until the pool grows.
type budget struct {
	*semaphore.Weighted
	reserved int64
}

func newBudget(base int64, grows bool) *budget {
	if !grows {
		return &budget{Weighted: semaphore.NewWeighted(base)}
	}
	b := &budget{Weighted: semaphore.NewWeighted(base * budgetGrowth), reserved: base * (budgetGrowth - 1)}
	b.TryAcquire(b.reserved) // always granted: the semaphore is new and holds that much
	return b
}

// grow adds n bytes to the budget, as far as growth allows.
func (b *budget) grow(n int64) {
	n = min(n, b.reserved)
	b.reserved -= n
	b.Release(n)
}

// runWorkers runs the pool until the queue closes: baseWorkers (or
// Concurrency, if lower) at once, more as the measured time to first byte
// asks for them while chunks are waiting, each with room for one more open
// file.
func (r *restorer) runWorkers(ctx context.Context, files *fileGate) {
	var wg sync.WaitGroup
	started := min(baseWorkers, r.opts.Concurrency)
	for range started {
		wg.Go(func() { r.worker(ctx) })
	}
	grow := func(to int) {
		if to <= started {
			return
		}
		files.open(to - started)
		r.inflight.grow(int64(to-started) * r.opts.ChunkSize)
		for ; started < to; started++ {
			wg.Go(func() { r.worker(ctx) })
		}
	}
	// Across the internet the manifest's reads showed the round trip:
	// the pool starts at the size it asks for.
	grow(wantWorkers(r.ttfb.seed, r.opts.Concurrency))
	r.log.Debug("download pool", zap.Duration("manifest_round_trip", r.ttfb.seed), zap.Int("workers", started))
	t := time.NewTicker(adaptEvery)
	defer t.Stop()
	for {
		select {
		case <-r.queue.done:
			wg.Wait()
			return
		case <-t.C:
			if started < r.opts.Concurrency && r.queue.waiting() {
				grow(wantWorkers(r.ttfb.get(), r.opts.Concurrency))
			}
		}
	}
}
