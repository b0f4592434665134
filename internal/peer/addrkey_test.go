package peer

import (
	"errors"
	"fmt"
	"net"
	"testing"
	"time"
)

// fakeConn is a connection from addr that does nothing.
type fakeConn struct {
	net.Conn
	addr net.Addr
}

func (c fakeConn) RemoteAddr() net.Addr             { return c.addr }
func (c fakeConn) Close() error                     { return nil }
func (c fakeConn) SetReadDeadline(time.Time) error  { return nil }
func (c fakeConn) SetWriteDeadline(time.Time) error { return nil }
func (c fakeConn) SetDeadline(time.Time) error      { return nil }

// fakeListener hands out conns, then fails.
type fakeListener struct {
	net.Listener
	conns []net.Conn
}

func (l *fakeListener) Accept() (net.Conn, error) {
	if len(l.conns) == 0 {
		return nil, errors.New("no more")
	}
	c := l.conns[0]
	l.conns = l.conns[1:]
	return c, nil
}

// A connection from 127.0.0.2 that sends no request is closed at the
// first-request deadline (3 s), well before the header timeout (a minute
// here); before, it stayed open for the header timeout.
func TestFirstRequestDeadline(t *testing.T) {
	st, _ := step(t, 1000)
	addr := freeAddrs(t, 1)[0]
	n, err := Start(Config{Bucket: st, Key: testKey, Listener: listen(t, addr), Peers: []string{addr},
		limits: serverLimits{header: time.Minute, idle: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	start := time.Now()
	if _, err := knock(addr, "127.0.0.2", false, 6*time.Second); err != nil {
		t.Fatalf("a connection without a request was still open after %v: %v", time.Since(start).Round(time.Second), err)
	}
	if took := time.Since(start); took > 4*time.Second {
		t.Errorf("closed after %v, want the first-request deadline of 3 s", took)
	}
}

// Issue 47 item 6: the per-address cap was bypassed with 35 addresses, and
// an IPv6 host is commonly given a /64. Connections are now counted per
// /64: 35 addresses of one /64 get the cap of one, while IPv4 addresses
// (and another /64) keep caps of their own. Before, all 35 were accepted.
func TestConnectionCapPerIPv6Prefix(t *testing.T) {
	var conns []net.Conn
	for i := range 35 {
		conns = append(conns, fakeConn{addr: &net.TCPAddr{IP: net.ParseIP(fmt.Sprintf("2001:db8:1:2::%x", i+1)), Port: 40000}})
	}
	conns = append(conns,
		fakeConn{addr: &net.TCPAddr{IP: net.ParseIP("2001:db8:1:3::1"), Port: 40000}},
		fakeConn{addr: &net.TCPAddr{IP: net.ParseIP("10.0.0.1"), Port: 40000}},
		fakeConn{addr: &net.TCPAddr{IP: net.ParseIP("10.0.0.2"), Port: 40000}})
	l := &perAddrListener{Listener: &fakeListener{conns: conns}, max: 8, open: map[string]int{}}
	accepted := map[string]int{}
	for {
		c, err := l.Accept()
		if err != nil {
			break
		}
		ip := c.RemoteAddr().(*net.TCPAddr).IP
		if ip.To4() == nil {
			ip = ip.Mask(net.CIDRMask(64, 128))
		}
		accepted[ip.String()]++
	}
	if got := accepted["2001:db8:1:2::"]; got != 8 {
		t.Errorf("%d connections from 35 addresses of one /64 accepted, want its cap of 8", got)
	}
	if accepted["2001:db8:1:3::"] != 1 || len(accepted) != 4 {
		t.Errorf("other prefixes and IPv4 addresses: %v, want one each", accepted)
	}
}
