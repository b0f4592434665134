package s3store

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"
)

// DefaultIdleTimeout is how long a connection with a request in flight may
// go without a byte sent or received before the attempt fails and is
// retried. A black-holed connection (packets dropped, no reset) otherwise
// hangs a request forever: neither the SDK nor net/http times out S3
// bodies. Servers keep busy connections alive (S3 sends spaces while it
// completes a large multipart upload), so a minute of silence is a dead
// link, not a slow server. FERRY_S3_IDLE_TIMEOUT overrides it.
const DefaultIdleTimeout = time.Minute

// EnvIdleTimeout names the environment variable that overrides
// DefaultIdleTimeout (a Go duration, e.g. 20s; 0 turns it off).
const EnvIdleTimeout = "FERRY_S3_IDLE_TIMEOUT"

// writeChunk bounds each write to the socket so that the idle deadline is
// renewed at least this often on a slow link: with 16 KiB, a link slower
// than 16 KiB per idle timeout is taken for dead.
const writeChunk = 16 << 10

// idleTimeout returns cfg's idle timeout, else EnvIdleTimeout's, else the
// default; a negative or zero value turns it off.
func idleTimeout(cfg Config) (time.Duration, error) {
	if cfg.IdleTimeout != 0 {
		return max(cfg.IdleTimeout, 0), nil
	}
	if v := os.Getenv(EnvIdleTimeout); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return 0, fmt.Errorf("s3store: %s=%q: want a duration such as 30s (0 turns the timeout off)", EnvIdleTimeout, v)
		}
		return d, nil
	}
	return DefaultIdleTimeout, nil
}

type dialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// idleDial wraps dial so that its connections fail an operation once
// nothing has moved either way for idle.
func idleDial(dial dialFunc, idle time.Duration) dialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil || idle <= 0 {
			return c, err
		}
		return &idleConn{Conn: c, idle: idle, addr: addr}, nil
	}
}

// idleConn renews one deadline for both directions on every read and
// every write, so progress either way keeps the other alive: a response
// awaited while a long body is still being sent does not time out, and a
// connection silent both ways fails. Progress includes the peer taking
// bytes out of the send queue: on a slow link the kernel buffers
// megabytes of a part, the writer waits for its answer long after its
// last write, and only the shrinking queue (outq) shows the link alive.
// The queue emptied counts once more: the peer still owes the answer.
type idleConn struct {
	net.Conn
	idle time.Duration
	addr string

	// The reader and the writer meet the same expired deadline at once:
	// the first to check decides for both (checkedAt within idle/2).
	mu        sync.Mutex
	queued    int64 // send queue at the last check; -1: none since progress
	checkedAt time.Time
	verdict   bool
}

func (c *idleConn) renew() {
	c.mu.Lock()
	c.queued, c.checkedAt = -1, time.Time{}
	c.mu.Unlock()
	_ = c.Conn.SetDeadline(time.Now().Add(c.idle))
}

// alive is asked when the deadline expired: it reports whether the peer
// took bytes from the send queue since the last check (at the first check:
// whether bytes are queued at all), and then extends the deadline by
// another idle period.
func (c *idleConn) alive() bool {
	now := time.Now()
	c.mu.Lock()
	recent, verdict := !c.checkedAt.IsZero() && now.Sub(c.checkedAt) < c.idle/2, c.verdict
	c.mu.Unlock()
	if !recent {
		q := outq(c.Conn)
		c.mu.Lock()
		last := c.queued
		verdict = (last < 0 && q > 0) || (last >= 0 && q >= 0 && q < last)
		c.queued, c.checkedAt, c.verdict = q, now, verdict
		c.mu.Unlock()
	}
	if verdict {
		_ = c.Conn.SetDeadline(now.Add(c.idle))
	}
	return verdict
}

// Read implements io.Reader.
func (c *idleConn) Read(p []byte) (int, error) {
	c.renew()
	for {
		n, err := c.Conn.Read(p)
		if n == 0 && errors.Is(err, os.ErrDeadlineExceeded) && c.alive() {
			continue
		}
		return n, c.mapErr(err)
	}
}

// Write implements io.Writer, in chunks that each renew the deadline.
func (c *idleConn) Write(p []byte) (int, error) {
	written := 0
	c.renew()
	for len(p) > 0 {
		n, err := c.Conn.Write(p[:min(len(p), writeChunk)])
		written += n
		p = p[n:]
		if n > 0 {
			c.renew()
		}
		if err != nil && !(errors.Is(err, os.ErrDeadlineExceeded) && (n > 0 || c.alive())) {
			return written, c.mapErr(err)
		}
	}
	return written, nil
}

func (c *idleConn) mapErr(err error) error {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return &IdleTimeoutError{Addr: c.addr, Idle: c.idle}
	}
	return err
}

// IdleTimeoutError is the error of a connection that went silent: nothing
// sent or received for Idle. The request is retried on a new connection.
type IdleTimeoutError struct {
	Addr string
	Idle time.Duration
}

func (e *IdleTimeoutError) Error() string {
	return fmt.Sprintf("connection to %s silent for %v: nothing received, nothing sent or taken by the peer (%s): closed, the request will be retried", e.Addr, e.Idle, EnvIdleTimeout)
}

// Timeout reports true: the error is a network timeout.
func (e *IdleTimeoutError) Timeout() bool { return true }

// Temporary reports true: a new connection may work.
func (e *IdleTimeoutError) Temporary() bool { return true }
