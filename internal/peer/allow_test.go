package peer

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// watchedConn is a connection from addr that counts its reads and closes.
type watchedConn struct {
	fakeConn
	reads, closes *atomic.Int64
}

func (c watchedConn) Read([]byte) (int, error) { c.reads.Add(1); return 0, io.EOF }
func (c watchedConn) Close() error             { c.closes.Add(1); return nil }

// Issue 47 item 6: --peer-listen can refuse addresses outside --peers. A
// connection from an address the allow list does not admit is closed as
// it is accepted, before a byte of it is read, and takes no slot of its
// address; one from an admitted address (IPv4, an IPv6 CIDR, an
// IPv4-mapped IPv6 address) is handed on.
func TestAllowClosesBeforeReading(t *testing.T) {
	allow, _, err := ParseAllow("10.1.2.3, fd00:1::/64")
	if err != nil {
		t.Fatal(err)
	}
	var reads, closes atomic.Int64
	conn := func(ip string) net.Conn {
		return watchedConn{fakeConn: fakeConn{addr: &net.TCPAddr{IP: net.ParseIP(ip), Port: 40000}}, reads: &reads, closes: &closes}
	}
	from := []string{"192.168.7.7", "10.1.2.3", "10.1.2.4", "fd00:1::99", "fd00:2::1", "::ffff:10.1.2.3"}
	var conns []net.Conn
	for _, ip := range from {
		conns = append(conns, conn(ip))
	}
	l := &perAddrListener{Listener: &fakeListener{conns: conns}, max: 8, open: map[string]int{}, allow: allow, refused: &refusals{}}
	var accepted []string
	for {
		c, err := l.Accept()
		if err != nil {
			break
		}
		accepted = append(accepted, c.RemoteAddr().(*net.TCPAddr).IP.String())
	}
	if want := []string{"10.1.2.3", "fd00:1::99", "10.1.2.3"}; !slices.Equal(accepted, want) {
		t.Errorf("accepted %v, want %v", accepted, want)
	}
	if reads.Load() != 0 || closes.Load() != 3 {
		t.Errorf("refused connections: %d reads, %d closes; want 0 reads and the 3 closed", reads.Load(), closes.Load())
	}
	if len(l.open) != 2 {
		t.Errorf("slots counted %v: want only the admitted addresses", l.open)
	}
}

// Over a real socket: a node allowing 127.0.0.1 alone closes a connection
// from 127.0.0.2 without answering its request, at once, while 127.0.0.1
// is answered (401 for an unsigned request). Before --peer-allow, every
// address was answered.
func TestAllowOverTheNetwork(t *testing.T) {
	st, _ := step(t, 1000)
	addr := freeAddrs(t, 1)[0]
	allow, _, err := ParseAllow("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	n, err := Start(Config{Bucket: st, Key: testKey, Listener: listen(t, addr), Peers: []string{addr}, Allow: allow})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if answered, err := knock(addr, "127.0.0.1", true, 5*time.Second); !answered || err != nil {
		t.Fatalf("127.0.0.1, allowed: answered %v, %v", answered, err)
	}
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	_ = c.SetDeadline(start.Add(5 * time.Second))
	_, _ = c.Write([]byte("GET /v1/plan HTTP/1.1\r\nHost: " + addr + "\r\n\r\n"))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err == nil {
		resp.Body.Close()
		t.Fatalf("127.0.0.2, not allowed, was answered %s", resp.Status)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() || !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("127.0.0.2: %v, want the connection closed", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("closed after %v, want at once", took)
	}
}

// ParseAllow reads addresses, CIDRs and "peers"; anything else, or a list
// that admits no one, is an error naming it.
func TestParseAllow(t *testing.T) {
	a, peers, err := ParseAllow("peers,10.0.0.0/8,::ffff:192.168.0.0/112,2001:db8::1")
	if err != nil || !peers || a.String() != "10.0.0.0/8,192.168.0.0/16,2001:db8::1/128" {
		t.Errorf("ParseAllow: %v %v %v", a, peers, err)
	}
	if a, peers, err := ParseAllow("peers"); err != nil || !peers || a == nil || len(a) != 0 {
		t.Errorf(`ParseAllow("peers"): %#v %v %v: want an empty, non-nil list to add the peers to`, a, peers, err)
	}
	for _, bad := range []string{"", ",", "node1", "10.0.0.0/33", "peer"} {
		if _, _, err := ParseAllow(bad); err == nil {
			t.Errorf("ParseAllow(%q): no error", bad)
		}
	}
	got, errs := ResolvePeers(t.Context(), []string{"127.0.0.1:7077", "127.0.0.1:7078", "[::1]:7077", "localhost:7077", "no-such-host.invalid:7077"})
	if len(errs) != 1 || !slices.Contains(got, single(mustAddr(t, "127.0.0.1"))) || !slices.Contains(got, single(mustAddr(t, "::1"))) {
		t.Errorf("ResolvePeers: %v, errors %v: want 127.0.0.1, ::1 (and localhost's) and one error", got, errs)
	}
}

func mustAddr(t *testing.T, s string) netip.Addr {
	t.Helper()
	ip, err := netip.ParseAddr(s)
	if err != nil {
		t.Fatal(err)
	}
	return ip
}
