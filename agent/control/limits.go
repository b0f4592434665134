package control

// What one caller of the control socket can hold: a connection slot for a
// bounded time. Anyone who may open the socket could otherwise hold
// thousands of idle connections (one descriptor and a goroutine's buffers
// each: 20,000 cost 428 MB and ran the agent out of descriptors).

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
)

// Defaults for zero Limits fields.
const (
	// DefaultMaxConns is how many connections the socket serves at once:
	// well above the flushes and commits of the ranks of a node.
	DefaultMaxConns = 128
	// DefaultReadTimeout bounds the reading of a request (headers and
	// body), from the moment the connection is accepted.
	DefaultReadTimeout = 10 * time.Second
	// DefaultIdleTimeout closes a connection that waits for its next
	// request (ferry's own client does not keep connections).
	DefaultIdleTimeout = 5 * time.Second
)

// Limits bound the control socket's connections. A request in flight
// (a flush that waits for a commit) is not timed out by them.
type Limits struct {
	// MaxConns is how many connections are open at once. Beyond it, the
	// oldest connection without a request in flight is closed to make
	// room; when every one has a request in flight, the new one is answered
	// 503 and closed.
	MaxConns int
	// ReadTimeout bounds reading a request; IdleTimeout the wait for the
	// next one on a kept connection.
	ReadTimeout, IdleTimeout time.Duration
}

func (l Limits) withDefaults() Limits {
	if l.MaxConns <= 0 {
		l.MaxConns = DefaultMaxConns
	}
	if l.ReadTimeout <= 0 {
		l.ReadTimeout = DefaultReadTimeout
	}
	if l.IdleTimeout <= 0 {
		l.IdleTimeout = DefaultIdleTimeout
	}
	return l
}

// apply sets srv's timeouts and returns ln wrapped to hold at most
// MaxConns connections (srv's ConnState tells it which are idle).
func (l Limits) apply(srv *http.Server, ln net.Listener, log *zap.Logger) net.Listener {
	l = l.withDefaults()
	srv.ReadHeaderTimeout, srv.ReadTimeout, srv.IdleTimeout = l.ReadTimeout, l.ReadTimeout, l.IdleTimeout
	cl := &capListener{Listener: ln, max: l.MaxConns, log: log, conns: map[*capConn]struct{}{},
		drains: make(chan struct{}, refuseDrains)}
	srv.ConnState = cl.connState
	return cl
}

// capListener accepts at most max connections at once.
type capListener struct {
	net.Listener
	max int
	log *zap.Logger
	// drains bounds the refused connections read before their close; wg
	// owns those readers.
	drains chan struct{}
	wg     sync.WaitGroup

	mu    sync.Mutex
	conns map[*capConn]struct{}
	// shed counts connections closed or refused at the cap since the last
	// warning, logged at most once a minute.
	shed     int
	lastWarn time.Time
}

// capConn is an accepted connection; idle and since are guarded by the
// listener's mu.
type capConn struct {
	net.Conn
	l     *capListener
	idle  bool      // no request in flight: new, or between requests
	since time.Time // when it became idle
}

// NetConn returns the accepted connection itself, for the caller's
// credentials (peer.go's connPeer), as tls.Conn does.
func (c *capConn) NetConn() net.Conn { return c.Conn }

// Close frees the connection's slot.
func (c *capConn) Close() error {
	c.l.mu.Lock()
	delete(c.l.conns, c)
	c.l.mu.Unlock()
	return c.Conn.Close()
}

// Accept returns the next connection, making room for it at the cap.
func (l *capListener) Accept() (net.Conn, error) {
	for {
		nc, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if c := l.admit(nc); c != nil {
			return c, nil
		}
	}
}

// admit takes nc under the cap, closing the oldest idle connection if
// there is no free slot; it returns nil, having refused nc, when every
// connection has a request in flight.
func (l *capListener) admit(nc net.Conn) net.Conn {
	now := time.Now()
	l.mu.Lock()
	var evict *capConn
	if len(l.conns) >= l.max {
		evict = l.oldestIdleLocked()
		if evict != nil {
			delete(l.conns, evict)
		}
	}
	var c *capConn
	if len(l.conns) < l.max {
		c = &capConn{Conn: nc, l: l, idle: true, since: now}
		l.conns[c] = struct{}{}
	}
	shed := 0 // connections shed since the last warning, when one is due
	if (c == nil || evict != nil) && l.shedLocked(now) {
		shed, l.shed = l.shed, 0
	}
	l.mu.Unlock()
	if shed > 0 {
		l.log.Warn("control socket at its connection cap: closing the oldest idle connections, refusing new ones while all are busy",
			zap.Int("max", l.max), zap.Int("shed", shed), zap.Bool("all_busy", c == nil))
	}
	if evict != nil {
		_ = evict.Conn.Close() // its server goroutine ends on the closed read
	}
	if c == nil {
		l.refuse(nc)
		return nil
	}
	return c
}

func (l *capListener) oldestIdleLocked() *capConn {
	var old *capConn
	for c := range l.conns {
		if c.idle && (old == nil || c.since.Before(old.since)) {
			old = c
		}
	}
	return old
}

// shedLocked counts a connection closed or refused at the cap, and says
// whether to warn: at most once a minute, with the count since.
func (l *capListener) shedLocked(now time.Time) bool {
	l.shed++
	if now.Sub(l.lastWarn) < time.Minute {
		return false
	}
	l.lastWarn = now
	return true
}

// connState follows the server's view of each connection: only one
// without a request in flight may be closed to make room.
func (l *capListener) connState(nc net.Conn, st http.ConnState) {
	c, ok := nc.(*capConn)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch st {
	case http.StateActive:
		c.idle = false
	case http.StateIdle:
		c.idle, c.since = true, time.Now()
	case http.StateHijacked, http.StateClosed:
		delete(l.conns, c)
	}
}

// busyResponse is what a connection refused at the cap reads.
const busyResponse = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nConnection: close\r\nContent-Length: 54\r\n\r\n" +
	"the agent's control socket is busy; try again shortly\n"

// A refused connection's request is read (its headers, for a moment)
// before it is answered 503 and closed: an answer that came before the
// request, or a close while the caller writes it, would reach the caller
// as a broken connection rather than "busy". At most refuseDrains are
// answered at once; the others are closed at once.
const (
	refuseDrains = 16
	refuseDrain  = 500 * time.Millisecond
)

// refuse answers nc 503 and closes it, or only closes it when too many
// are being answered.
func (l *capListener) refuse(nc net.Conn) {
	select {
	case l.drains <- struct{}{}:
	default:
		_ = nc.Close()
		return
	}
	l.wg.Go(func() {
		defer func() { <-l.drains }()
		defer nc.Close()
		_ = nc.SetDeadline(time.Now().Add(refuseDrain))
		r := bufio.NewReader(io.LimitReader(nc, 16<<10))
		for {
			line, err := r.ReadString('\n')
			if err != nil || strings.TrimRight(line, "\r\n") == "" {
				break
			}
		}
		_, _ = nc.Write([]byte(busyResponse))
	})
}

// Close stops accepting and waits for the refused connections being
// drained.
func (l *capListener) Close() error {
	err := l.Listener.Close()
	l.wg.Wait()
	return err
}
