package restore

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/ferrylabs/ferry/internal/units"
)

// Defaults of the low-speed guard (Options.LowSpeedLimit and
// LowSpeedTime), as curl's --speed-limit and --speed-time: a GET body that
// delivers less than 16 KiB/s for 30 s is cut. A real link of a GPU
// cluster is thousands of times faster per stream; a body that slow is a
// broken server or path, and waiting on it holds every GPU of the job.
const (
	DefaultLowSpeedLimit = 16 << 10
	DefaultLowSpeedTime  = 30 * time.Second
)

// errLowSpeed is wrapped by the read error of a body the guard cut.
var errLowSpeed = errors.New("body too slow")

// lowSpeedBody passes a GET body through and closes it when fewer than
// limit x window bytes arrived in a window, so that a server trickling
// bytes (or stalling) fails the request after a bounded time instead of
// holding the restore forever. Reads then fail with an error wrapping
// errLowSpeed.
type lowSpeedBody struct {
	rc     io.ReadCloser
	limit  int64
	window time.Duration

	mu     sync.Mutex
	n      int64 // bytes read so far
	mark   int64 // n at the start of the current window
	cut    bool
	timer  *time.Timer
	closed bool
}

func guardBody(rc io.ReadCloser, limit int64, window time.Duration) io.ReadCloser {
	if limit <= 0 || window <= 0 {
		return rc
	}
	b := &lowSpeedBody{rc: rc, limit: limit, window: window}
	b.mu.Lock()
	b.timer = time.AfterFunc(window, b.check)
	b.mu.Unlock()
	return b
}

// check ends a window: too few bytes cut the body, else a new window starts.
func (b *lowSpeedBody) check() {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return
	}
	if float64(b.n-b.mark) < float64(b.limit)*b.window.Seconds() {
		b.cut = true
		b.mu.Unlock()
		b.rc.Close() // unblocks a Read in progress
		return
	}
	b.mark = b.n
	b.timer.Reset(b.window)
	b.mu.Unlock()
}

func (b *lowSpeedBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	b.mu.Lock()
	b.n += int64(n)
	cut := b.cut
	b.mu.Unlock()
	if err != nil && cut {
		err = fmt.Errorf("%w: less than %s/s for %v (--low-speed-limit, --low-speed-time)", errLowSpeed, units.FormatBytes(b.limit), b.window)
	}
	return n, err
}

func (b *lowSpeedBody) Close() error {
	b.mu.Lock()
	b.closed = true
	b.timer.Stop()
	b.mu.Unlock()
	return b.rc.Close()
}
