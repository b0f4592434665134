package peer

import (
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/netutil"
)

// The peer port is reachable by anyone on the cluster network, so what a
// connection may hold is bounded before anyone is authenticated: how long
// it may take to send its request, how long it may stay idle between
// requests, how long a write of the answer may stall, and how many
// connections are open at once (the rest wait in the kernel's backlog),
// in all and from one address (more from it are closed at once).
// Honest peers send small bodiless requests and read at the speed of the
// network; none of these limits is near what they need.
const (
	// DefaultMaxConns bounds a node's open peer connections: each peer's
	// client keeps at most maxConnsPerPeer, so 64 nodes fit.
	DefaultMaxConns = 4096
	maxConnsPerPeer = 64
	// defaultMaxConnsPerAddr bounds the connections from one address, so
	// that one host cannot take every slot of DefaultMaxConns from the
	// job's nodes: twice what an honest peer's client opens.
	defaultMaxConnsPerAddr = 2 * maxConnsPerPeer
	// maxPlanBytes bounds a plan answer: a plan lists the objects of one
	// step a node fetches or holds (files of at least 4 MiB; smaller ones
	// are packed and not exchanged), about 100 bytes each, so 16 MiB is
	// some 150,000 objects.
	maxPlanBytes = 16 << 20
)

// serverLimits are the peer server's limits; tests make them short.
type serverLimits struct {
	header time.Duration // to send a request's header (and body)
	idle   time.Duration // between requests on one connection
	stall  time.Duration // for one write of an answer to complete
	conns  int           // open connections at once
	// perAddr bounds the open connections from one IP address; one more
	// is closed at once, before it takes one of conns.
	perAddr int
}

func (l serverLimits) withDefaults() serverLimits {
	if l.header <= 0 {
		l.header = 10 * time.Second
	}
	if l.idle <= 0 {
		l.idle = 30 * time.Second
	}
	if l.stall <= 0 {
		l.stall = 30 * time.Second
	}
	if l.conns <= 0 {
		l.conns = DefaultMaxConns
	}
	if l.perAddr <= 0 {
		l.perAddr = defaultMaxConnsPerAddr
	}
	return l
}

// newServer returns the peer server for h: the timeouts above, and a
// write deadline for the whole answer (the wait for a range plus a stall)
// that serving a range extends as it writes (stallWriter).
func newServer(h http.Handler, l serverLimits, wait time.Duration, open *atomic.Int64) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: l.header,
		ReadTimeout:       l.header,
		WriteTimeout:      wait + l.stall,
		IdleTimeout:       l.idle,
		MaxHeaderBytes:    16 << 10,
		ConnState: func(_ net.Conn, s http.ConnState) {
			switch s {
			case http.StateNew:
				open.Add(1)
			case http.StateClosed, http.StateHijacked:
				open.Add(-1)
			}
		},
	}
}

// limitListener caps the connections accepted from ln at once, in all
// and from each address.
func limitListener(ln net.Listener, l serverLimits) net.Listener {
	return netutil.LimitListener(&perAddrListener{Listener: ln, max: l.perAddr, open: map[string]int{}}, l.conns)
}

// perAddrListener closes, as soon as it is accepted, a connection from an
// address that already has max open: without it, one host holding
// connections open (each for up to the header and idle timeouts) could
// take every slot and leave the job's nodes waiting in the backlog.
type perAddrListener struct {
	net.Listener
	max  int
	mu   sync.Mutex
	open map[string]int
}

func (l *perAddrListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		addr := remoteIP(c)
		l.mu.Lock()
		ok := l.open[addr] < l.max
		if ok {
			l.open[addr]++
		}
		l.mu.Unlock()
		if ok {
			return &addrConn{Conn: c, done: func() { l.closed(addr) }}, nil
		}
		c.Close()
	}
}

func (l *perAddrListener) closed(addr string) {
	l.mu.Lock()
	if l.open[addr]--; l.open[addr] <= 0 {
		delete(l.open, addr)
	}
	l.mu.Unlock()
}

// remoteIP is the address a connection comes from, without its port.
func remoteIP(c net.Conn) string {
	a := c.RemoteAddr().String()
	if host, _, err := net.SplitHostPort(a); err == nil {
		return host
	}
	return a
}

// addrConn counts itself out of its address's connections once, on its
// first Close.
type addrConn struct {
	net.Conn
	once sync.Once
	done func()
}

func (c *addrConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.done)
	return err
}

// clearReadDeadline lifts ReadTimeout once a request is read: requests
// have no body, and net/http would otherwise cancel a long answer (a
// range waited for, then sent) when the deadline passes under it.
func clearReadDeadline(w http.ResponseWriter) {
	_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
}

// stallWriter writes an answer, each write due within stall: a reader
// that stops reading loses its connection, one that reads slowly but
// steadily (a peer at its --bandwidth) does not.
type stallWriter struct {
	w     http.ResponseWriter
	rc    *http.ResponseController
	stall time.Duration
}

func newStallWriter(w http.ResponseWriter, stall time.Duration) *stallWriter {
	return &stallWriter{w: w, rc: http.NewResponseController(w), stall: stall}
}

func (s *stallWriter) Write(p []byte) (int, error) {
	_ = s.rc.SetWriteDeadline(time.Now().Add(s.stall))
	return s.w.Write(p)
}
