package control

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
)

// TestControlIdleFlood: thousands of idle connections on the control
// socket (a caller that may open it, holding them) cost the agent at most
// MaxConns descriptors, a status call is answered while they are held, and
// the server closes every one of them itself within its timeouts. Before
// (bcdfe6d) the agent held one descriptor (and a goroutine's buffers) per
// connection for ReadHeaderTimeout, and for ever once a request had been
// sent on it: 20,000 took 428 MB and ran it out of descriptors.
func TestControlIdleFlood(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("counts descriptors in /proc/self/fd")
	}
	const maxConns, flood = 32, 3000
	dir := filepath.Join(t.TempDir(), "state")
	s, err := Listen(SocketPath(dir), zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	s.Limits = Limits{MaxConns: maxConns, ReadTimeout: time.Second, IdleTimeout: time.Second}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, &fakeController{status: testStatus()}) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	cl := Dial(dir)
	if _, err := cl.Status(ctx); err != nil { // serving, its descriptors open
		t.Fatal(err)
	}
	before := openFDs(t)
	conns := make([]net.Conn, 0, flood)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range flood {
		c, err := net.Dial("unix", SocketPath(dir))
		if err != nil {
			t.Fatalf("connection %d: %v", len(conns), err)
		}
		conns = append(conns, c)
	}
	// What the agent holds: the descriptors beyond the test's own.
	held := func() int { return openFDs(t) - before - len(conns) }
	deadline := time.Now().Add(3 * time.Second)
	for held() > maxConns+4 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := held(); n > maxConns+4 {
		t.Fatalf("the server holds %d descriptors for %d idle connections, want at most the cap %d", n, flood, maxConns)
	}
	sctx, scancel := context.WithTimeout(ctx, 5*time.Second)
	defer scancel()
	st, err := cl.Status(sctx)
	if err != nil {
		t.Fatalf("status while %d connections are held: %v", flood, err)
	}
	if !reflect.DeepEqual(st, testStatus()) {
		t.Fatalf("status %+v", st)
	}
	// Every flood connection is closed by the server: those it shed at
	// once, the last MaxConns after ReadTimeout.
	for i, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
		if _, err := io.ReadAll(c); err != nil && !errors.Is(err, net.ErrClosed) {
			t.Fatalf("flood connection %d not closed by the server within 3 s: %v", i, err)
		}
	}
}

// TestControlCapRefusesWhenAllBusy: at the cap with every connection in
// a request (long flushes), a new caller is answered 503 at once rather
// than left waiting or taking a slot, and is served once one frees.
func TestControlCapRefusesWhenAllBusy(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	s, err := Listen(SocketPath(dir), zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	s.Limits = Limits{MaxConns: 2}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	fc := &fakeController{status: testStatus(), flush: waitThenReport(7), flushed: make(chan context.Context, 2)}
	go func() { done <- s.Serve(ctx, fc) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	cl := Dial(dir)
	fctx, fcancel := context.WithCancel(ctx)
	flushes := make(chan error, 2)
	for range 2 {
		go func() { _, err := cl.Flush(fctx, 0); flushes <- err }()
	}
	<-fc.flushed
	<-fc.flushed
	sctx, scancel := context.WithTimeout(ctx, 5*time.Second)
	defer scancel()
	_, err = cl.Status(sctx)
	if err == nil || sctx.Err() != nil {
		t.Fatalf("status with every slot busy: %v, want a prompt refusal", err)
	}
	if !strings.Contains(err.Error(), "busy") {
		t.Errorf("refused with %v, want it to say the socket is busy", err)
	}
	fcancel()
	<-flushes
	<-flushes
	waitUntil(t, 5*time.Second, func() bool { _, err := cl.Status(sctx); return err == nil })
}

func waitUntil(t *testing.T, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v", d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}
