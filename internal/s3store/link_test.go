package s3store

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"
)

// listen returns a loopback listener whose connections have a small
// receive buffer (the send queue then shows the peer's pace, as on a
// link whose bottleneck is the network) and a dialer of idleConns to it.
func listen(t *testing.T, idle time.Duration) (net.Listener, dialFunc) {
	t.Helper()
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 64<<10) })
		return errors.Join(err, serr)
	}}
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln, idleDial((&net.Dialer{}).DialContext, idle)
}

// A peer that takes nothing and says nothing: a write fails within two
// idle periods once the buffers are full, and a read within one.
func TestIdleConnSilentPeer(t *testing.T) {
	const idle = 300 * time.Millisecond
	ln, dial := listen(t, idle)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			time.Sleep(10 * time.Second)
			c.Close()
		}
	}()
	c, err := dial(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	_, err = c.Write(make([]byte, 64<<20))
	var ie *IdleTimeoutError
	if !errors.As(err, &ie) {
		t.Fatalf("write to a silent peer: %v, want an IdleTimeoutError", err)
	}
	if d := time.Since(start); d > 5*idle {
		t.Errorf("write to a silent peer failed after %v, want within about 2 x %v", d, idle)
	}
	start = time.Now()
	if _, err = c.Read(make([]byte, 1)); !errors.As(err, &ie) {
		t.Fatalf("read from a silent peer: %v, want an IdleTimeoutError", err)
	}
	t.Logf("read failed after %v: %v", time.Since(start), err)
}

// A slow peer that takes 32 KiB every 10 ms (3.2 MB/s): the writer blocks
// for far longer than the idle timeout between wakeups (the kernel wakes
// it once a third of the send buffer has drained), and a read waiting for
// the answer meanwhile sees nothing at all, yet the shrinking send queue
// keeps the connection alive.
func TestIdleConnSlowPeer(t *testing.T) {
	const idle = 200 * time.Millisecond
	ln, dial := listen(t, idle)
	const size = 12 << 20
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, 32<<10)
		for got := 0; got < size; {
			n, err := io.ReadFull(c, buf[:min(len(buf), size-got)])
			if err != nil {
				return
			}
			got += n
			time.Sleep(10 * time.Millisecond)
		}
		_, _ = c.Write([]byte("k"))
	}()
	c, err := dial(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	answer := make(chan error, 1)
	go func() {
		_, err := io.ReadFull(c, make([]byte, 1))
		answer <- err
	}()
	start := time.Now()
	if _, err := c.Write(make([]byte, size)); err != nil {
		t.Fatalf("write to a slow peer after %v: %v", time.Since(start), err)
	}
	if err := <-answer; err != nil {
		t.Fatalf("read the answer of a slow peer after %v: %v", time.Since(start), err)
	}
	t.Logf("12 MiB to a peer at 3.2 MB/s in %v with an idle timeout of %v", time.Since(start).Round(time.Millisecond), idle)
}
