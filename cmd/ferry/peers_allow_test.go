package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/internal/s3test"
)

// askPeerPort sends an unsigned plan request to addr from the address
// from and says what came back: the status line, or "closed" when the
// node closed the connection without answering.
func askPeerPort(t *testing.T, addr, from string) string {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return "no connection: " + err.Error()
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	_, _ = c.Write([]byte("GET /v1/plan HTTP/1.1\r\nHost: " + addr + "\r\n\r\n"))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) {
			return "closed"
		}
		return err.Error()
	}
	resp.Body.Close()
	return resp.Status
}

// peerRestore is one `ferry restore --peers` running.
type peerRestore struct {
	cmd            *exec.Cmd
	to             string
	stdout, stderr *bytes.Buffer
}

// startPeerRestore starts `ferry restore --peers` as node rank of addrs,
// with args added.
func startPeerRestore(t *testing.T, srv *s3test.Server, url string, addrs []string, rank int, args ...string) peerRestore {
	t.Helper()
	to := filepath.Join(t.TempDir(), "ckpt")
	cmd := ferryCmd(t, srv, append([]string{"restore", "--from", url, "--to", to, "--json",
		"--peers", strings.Join(addrs, ","), "--peer-rank", fmt.Sprint(rank), "--peer-wait", "20s", "--peer-linger", "1s"}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return peerRestore{cmd, to, &stdout, &stderr}
}

// Issue 47 item 6: --peer-allow peers closes the peer port to every host
// --peers does not name. While node 0 waits for node 1, a connection from
// 127.0.0.2 (not in --peers) is closed without an answer, one from
// 127.0.0.1 is answered (401: unsigned); then node 1 joins and both
// restore every file, half of the bytes from each other. Without the
// flag the same connection from 127.0.0.2 is answered. Bad lists are
// usage errors, and an agent's --serve-peers takes no "peers".
func TestCLIPeerAllow(t *testing.T) {
	srv := s3test.Shared(t)
	url, src := pushPeerStep(t, srv)
	for _, c := range []struct {
		allow    []string
		stranger string
	}{{[]string{"--peer-allow", "peers"}, "closed"}, {nil, "401 Unauthorized"}} {
		addrs := freePorts(t, 2)
		first := startPeerRestore(t, srv, url, addrs, 0, c.allow...)
		waitFor(t, "node 0's peer port", 30*time.Second, func() bool {
			return askPeerPort(t, addrs[0], "127.0.0.1") == "401 Unauthorized"
		})
		if got := askPeerPort(t, addrs[0], "127.0.0.2"); got != c.stranger {
			t.Errorf("%v: a connection from 127.0.0.2, outside --peers: %s, want %s", c.allow, got, c.stranger)
		}
		second := startPeerRestore(t, srv, url, addrs, 1, c.allow...)
		for i, r := range []peerRestore{first, second} {
			if err := r.cmd.Wait(); err != nil {
				t.Fatalf("node %d: %v\n%s", i, err, r.stderr.String())
			}
			var sum restoreSummary
			decodeJSON(t, r.stdout.String(), &sum)
			if sum.Peers == nil || sum.Peers.Joined != 1 || sum.Files != 2 {
				t.Fatalf("node %d with %v: %+v\n%s", i, c.allow, sum.Peers, r.stderr.String())
			}
			sameFiles(t, src, r.to)
		}
		if c.allow != nil && !strings.Contains(first.stderr.String(), "closed a peer connection from an address outside --peer-allow") {
			t.Errorf("node 0 did not log the refused connection:\n%s", first.stderr.String())
		}
	}
	for _, args := range [][]string{
		{"restore", "--from", url, "--to", t.TempDir(), "--peers", "127.0.0.1:1,127.0.0.1:2", "--peer-allow", "node7"},
		{"agent", "--watch", t.TempDir(), "--to", url, "--serve-peers", "127.0.0.1:0", "--peer-allow", "peers"},
	} {
		if r := ferry(t, srv, args...).must(t, 2); strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 || !strings.Contains(r.stderr, "--peer-allow") {
			t.Errorf("ferry %s: want one line naming --peer-allow, got %q", strings.Join(args, " "), r.stderr)
		}
	}
}
