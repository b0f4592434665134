// Package ratelimit caps a byte rate shared by many concurrent streams, so
// ferry's uploads do not starve the training job's own network traffic.
package ratelimit

import (
	"context"
	"io"
	"sync"
	"time"
)

// Limiter paces byte transfers to a rate. The zero value and nil are
// unlimited. It is safe for concurrent use.
type Limiter struct {
	mu   sync.Mutex
	rate float64 // bytes per second
	next time.Time
	// burst is how far ahead of the pace a caller may run, so small reads
	// do not each sleep.
	burst time.Duration
}

// New returns a limiter of bytesPerSec; <= 0 means unlimited (nil).
func New(bytesPerSec int64) *Limiter {
	if bytesPerSec <= 0 {
		return nil
	}
	return &Limiter{rate: float64(bytesPerSec), burst: 50 * time.Millisecond}
}

// Wait blocks until n more bytes may be sent.
func (l *Limiter) Wait(ctx context.Context, n int64) error {
	if l == nil || n <= 0 {
		return nil
	}
	l.mu.Lock()
	now := time.Now()
	if l.next.Before(now.Add(-l.burst)) {
		l.next = now.Add(-l.burst)
	}
	start := l.next
	l.next = l.next.Add(time.Duration(float64(n) / l.rate * float64(time.Second)))
	l.mu.Unlock()
	d := time.Until(start)
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Reader wraps an io.ReadSeeker so that its reads are paced by l. Seeking
// is passed through: bytes read again after a rewind (a retried request)
// are paced again, as they are sent again.
type Reader struct {
	R   io.ReadSeeker
	L   *Limiter
	Ctx context.Context
}

// maxRead bounds one paced read so that the pace stays smooth.
const maxRead = 256 << 10

// Read implements io.Reader.
func (r *Reader) Read(p []byte) (int, error) {
	if len(p) > maxRead {
		p = p[:maxRead]
	}
	if err := r.L.Wait(r.Ctx, int64(len(p))); err != nil {
		return 0, err
	}
	return r.R.Read(p)
}

// Seek implements io.Seeker.
func (r *Reader) Seek(off int64, whence int) (int64, error) { return r.R.Seek(off, whence) }

// Body paces the reads of a received stream, such as a GET's body, by l:
// each read pays for the bytes it returned, once they arrived. A nil l
// does not pace.
type Body struct {
	R   io.Reader
	L   *Limiter
	Ctx context.Context
}

// Read implements io.Reader.
func (b *Body) Read(p []byte) (int, error) {
	n, err := b.R.Read(p)
	if werr := b.L.Wait(b.Ctx, int64(n)); werr != nil {
		return n, werr
	}
	return n, err
}
