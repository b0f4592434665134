package peer

import (
	"context"
	"crypto/tls"
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
	// first bounds the wait for a connection's first signed request
	// (TLS handshake included): an honest peer sends it at once, so a
	// connection held open without one frees its slot sooner.
	first time.Duration
	idle  time.Duration // between requests on one connection
	stall time.Duration // for one write of an answer to complete
	conns int           // open connections at once
	// perAddr bounds the open connections from one IP address; one more
	// is closed at once, before it takes one of conns.
	perAddr int
}

func (l serverLimits) withDefaults() serverLimits {
	if l.header <= 0 {
		l.header = 10 * time.Second
	}
	if l.first <= 0 || l.first > l.header {
		l.first = min(3*time.Second, l.header)
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
		ConnContext:       withConn,
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
// and from each address, and closes at once those from addresses allow
// does not admit (allow.go).
func limitListener(ln net.Listener, l serverLimits, allow Allowed, refused *refusals) net.Listener {
	return netutil.LimitListener(&perAddrListener{Listener: ln, max: l.perAddr, first: l.first, open: map[string]int{},
		allow: allow, refused: refused}, l.conns)
}

// perAddrListener closes, as soon as it is accepted, a connection from an
// address that already has max open: without it, one host holding
// connections open (each for up to the header and idle timeouts) could
// take every slot and leave the job's nodes waiting in the backlog.
type perAddrListener struct {
	net.Listener
	max     int
	first   time.Duration
	allow   Allowed   // nil: any address
	refused *refusals // notes what allow refuses (nil: nothing)
	mu      sync.Mutex
	open    map[string]int
}

func (l *perAddrListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if !l.allow.admits(c.RemoteAddr()) {
			// Before a byte is read: no handshake, no header, no slot.
			c.Close()
			if l.refused != nil {
				l.refused.note(c.RemoteAddr())
			}
			continue
		}
		addr := addrKey(c)
		l.mu.Lock()
		ok := l.open[addr] < l.max
		if ok {
			l.open[addr]++
		}
		l.mu.Unlock()
		if ok {
			ac := &addrConn{Conn: c, first: time.Now().Add(l.first), done: func() { l.closed(addr) }}
			_ = ac.SetReadDeadline(ac.first)
			return ac, nil
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

// addrKey is what the per-address cap counts a connection under: its
// IPv4 address, or the /64 of its IPv6 address (one host is commonly
// given a whole /64, so counting addresses would let it take every slot).
func addrKey(c net.Conn) string {
	ip := net.ParseIP(remoteIP(c))
	if ip == nil || ip.To4() != nil {
		return remoteIP(c)
	}
	return ip.Mask(net.CIDRMask(64, 128)).String() + "/64"
}

// addrConn counts itself out of its address's connections once, on its
// first Close. Until its first signed request (introduce), no read
// deadline set on it lies beyond first.
type addrConn struct {
	net.Conn
	once       sync.Once
	done       func()
	first      time.Time
	introduced atomic.Bool
}

// SetReadDeadline caps what net/http asks (the header timeout, or none)
// at the first-request deadline until the connection is introduced.
func (c *addrConn) SetReadDeadline(t time.Time) error {
	if !c.introduced.Load() && (t.IsZero() || t.After(c.first)) {
		t = c.first
	}
	return c.Conn.SetReadDeadline(t)
}

// SetDeadline caps the read side as SetReadDeadline does.
func (c *addrConn) SetDeadline(t time.Time) error {
	if err := c.Conn.SetWriteDeadline(t); err != nil {
		return err
	}
	return c.SetReadDeadline(t)
}

type connKey struct{}

// introduce lifts the first-request deadline of the connection r came on,
// once r proved to be signed with the job's key.
func introduce(r *http.Request) {
	if c, ok := r.Context().Value(connKey{}).(*addrConn); ok {
		c.introduced.Store(true)
	}
}

// withConn keeps the connection's addrConn in its requests' context (under
// TLS, the one the tls.Conn wraps).
func withConn(ctx context.Context, c net.Conn) context.Context {
	if t, ok := c.(*tls.Conn); ok {
		c = t.NetConn()
	}
	if ac, ok := c.(*addrConn); ok {
		return context.WithValue(ctx, connKey{}, ac)
	}
	return ctx
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
