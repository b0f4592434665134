package main

import (
	"bytes"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/internal/s3test"
	"github.com/ferrylabs/ferry/internal/wanlink"
)

// A link that degrades in the middle of a push or a restore (toxiproxy
// changes its toxics on the open connections: the round trip from 20 to
// 300 ms, the rate per connection from 5 to 0.5 MB/s, then back) slows
// the transfer and nothing else: exit 0, no error or warning, and the
// restored files are the pushed ones byte for byte (restore checks every
// BLAKE3). Needs the toxiproxy server binary (FERRY_TOXIPROXY; make
// test-wan builds it).
func TestCLIDegradingLink(t *testing.T) {
	srv := s3test.Shared(t)
	good := wanlink.Link{RTT: 20 * time.Millisecond, Rate: 5e6}
	bad := wanlink.Link{RTT: 300 * time.Millisecond, Rate: 500e3}
	proxy, through := srv.ThroughLink(t, good)
	endpoint := "S3_ENDPOINT_URL=" + through

	src := t.TempDir()
	for r := range 8 {
		writeFile(t, filepath.Join(src, fmt.Sprintf("rank%d.pt", r)), randomBytes(12<<20+r*4099, byte(r+1)))
	}
	for i := range 200 {
		writeFile(t, filepath.Join(src, "shards", fmt.Sprintf("s%03d.bin", i)), randomBytes(16<<10+i, byte(i)))
	}
	to := "s3://" + srv.NewBucket(t) + "/run"
	push := ferryCmd(t, srv, "push", "--to", to, "--step", "5", "--part-size", "5MiB", "--state-dir", t.TempDir(), src)
	push.Env = append(push.Env, endpoint)
	throughDegradation(t, proxy, push, good, bad)

	dst := filepath.Join(t.TempDir(), "restored")
	restore := ferryCmd(t, srv, "restore", "--from", to, "--to", dst)
	restore.Env = append(restore.Env, endpoint)
	throughDegradation(t, proxy, restore, good, bad)
	sameTree(t, src, dst)
}

// throughDegradation runs cmd, degrades the link to bad while it runs and
// restores good two seconds later, and fails t unless cmd exits 0 with
// nothing logged at warn or error and was still running when the link
// degraded (else the test proved nothing: make its data larger).
func throughDegradation(t *testing.T, proxy *wanlink.Proxy, cmd *exec.Cmd, good, bad wanlink.Link) {
	t.Helper()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	for _, phase := range []struct {
		after time.Duration
		link  wanlink.Link
		what  string
	}{{300 * time.Millisecond, bad, "before the link degraded"}, {2 * time.Second, good, "within the degraded 2 s"}} {
		select {
		case err := <-done:
			t.Fatalf("%s finished (%v) %s; the test needs more data\nstderr: %s", cmd.Args[1], err, phase.what, errb.String())
		case <-time.After(phase.after):
		}
		if err := proxy.Set(phase.link); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-done; err != nil {
		t.Fatalf("%s over a degrading link: %v\nstdout: %s\nstderr: %s", cmd.Args[1], err, out.String(), errb.String())
	}
	t.Logf("%s over a link degraded from 0.3 s to 2.3 s: %.1f s", cmd.Args[1], time.Since(start).Seconds())
	for _, line := range strings.Split(errb.String(), "\n") {
		if strings.Contains(line, "WARN") || strings.Contains(line, "ERROR") || strings.Contains(line, "\"warn\"") || strings.Contains(line, "\"error\"") {
			t.Errorf("%s logged over a degrading link: %s", cmd.Args[1], line)
		}
	}
}
