package main

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/internal/s3test"
)

// pushPeerStep pushes a step of unpacked files (peers share those) and
// returns its URL and the folder pushed.
func pushPeerStep(t *testing.T, srv *s3test.Server) (string, string) {
	t.Helper()
	url := "s3://" + srv.NewBucket(t) + "/run"
	src := t.TempDir()
	for i, n := range []int{5<<20 + 3, 1000} {
		writeFile(t, filepath.Join(src, fmt.Sprintf("rank%d.pt", i)), randomBytes(n, byte(i+1)))
	}
	ferry(t, srv, "push", "--to", url, "--step", "3", "--pack=false", src).must(t, 0)
	return url, src
}

func sameFiles(t *testing.T, want, got string) {
	t.Helper()
	ents, _ := os.ReadDir(want)
	for _, e := range ents {
		a, _ := os.ReadFile(filepath.Join(want, e.Name()))
		b, err := os.ReadFile(filepath.Join(got, e.Name()))
		if err != nil || !bytes.Equal(a, b) {
			t.Fatalf("%s restored in %s differs from what was pushed (%v)", e.Name(), got, err)
		}
	}
}

// freePorts returns n loopback addresses nobody listens on.
func freePorts(t *testing.T, n int) []string {
	t.Helper()
	var out []string
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, ln.Addr().String())
		ln.Close()
	}
	return out
}

// A node whose peer port someone else holds restores from the bucket
// alone, with a warning, and exits 0 with every file right: a cooperative
// restore finishes whenever the bucket is reachable.
func TestCLIPeerPortTaken(t *testing.T) {
	srv := s3test.Shared(t)
	url, src := pushPeerStep(t, srv)
	squat, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer squat.Close()
	addrs := []string{squat.Addr().String(), freePorts(t, 1)[0]}
	out := filepath.Join(t.TempDir(), "ckpt")
	// No --peer-listen: this node listens on its own entry, the squatted one.
	r := ferry(t, srv, "restore", "--from", url, "--to", out, "--json",
		"--peers", strings.Join(addrs, ","), "--peer-rank", "0").must(t, 0)
	if !strings.Contains(r.stderr, "restoring from the bucket alone") {
		t.Fatalf("no warning that the node restores alone:\n%s", r.stderr)
	}
	var sum restoreSummary
	decodeJSON(t, r.stdout, &sum)
	if sum.Peers != nil || sum.Files != 2 {
		t.Fatalf("summary %+v, want 2 files and no peers", sum)
	}
	sameFiles(t, src, out)
}

// Without --peer-listen a node serves its peers on the address it has in
// --peers (127.0.0.1 here), not on every interface (127.0.0.2 reaches
// every interface of this machine, not 127.0.0.1's socket).
func TestCLIPeerListenDefault(t *testing.T) {
	srv := s3test.Shared(t)
	url, src := pushPeerStep(t, srv)
	addrs := freePorts(t, 2)
	out := filepath.Join(t.TempDir(), "ckpt")
	cmd := ferryCmd(t, srv, "restore", "--from", url, "--to", out, "--peers", strings.Join(addrs, ","), "--peer-rank", "0", "--peer-wait", "8s")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	// The other node never starts: this one waits --peer-wait for it,
	// serving meanwhile.
	_, port, _ := net.SplitHostPort(addrs[0])
	served, running := false, true
	for deadline := time.Now().Add(30 * time.Second); running && !served && time.Now().Before(deadline); {
		if c, err := net.Dial("tcp", addrs[0]); err == nil {
			c.Close()
			served = true
		}
		select {
		case err := <-exited:
			exited <- err
			running = false
		case <-time.After(50 * time.Millisecond):
		}
	}
	other, otherErr := net.Dial("tcp", net.JoinHostPort("127.0.0.2", port))
	if otherErr == nil {
		other.Close()
	}
	if err := <-exited; err != nil {
		t.Fatalf("restore: %v\n%s", err, stderr.String())
	}
	if !served {
		t.Fatalf("nothing listened on %s, this node's address in --peers\n%s", addrs[0], stderr.String())
	}
	if otherErr == nil {
		t.Fatalf("the peer port is open on 127.0.0.2 too: listening on every interface")
	}
	sameFiles(t, src, out)
}

// The peers' secret comes from a file (FERRY_PEER_TOKEN_FILE, as the
// deploy templates give it) or the environment; on the command line it
// still works, with a warning that ps shows it. Nodes with the same
// secret join; with another they do not. Bad token flags are one-line
// usage errors.
func TestCLIPeerTokenFile(t *testing.T) {
	srv := s3test.Shared(t)
	url, _ := pushPeerStep(t, srv)
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	writeFile(t, tokenFile, []byte("job-secret\n"))
	pair := func(second []string, env string) (joined [2]int, stderr [2]string) {
		t.Helper()
		addrs := freePorts(t, 2)
		var cmds [2]*exec.Cmd
		var outs, errs [2]bytes.Buffer
		for i := range 2 {
			args := []string{"restore", "--from", url, "--to", filepath.Join(t.TempDir(), "ckpt"), "--json",
				"--peers", strings.Join(addrs, ","), "--peer-rank", fmt.Sprint(i), "--peer-wait", "3s", "--peer-linger", "1s"}
			if i == 1 {
				args = append(args, second...)
			}
			cmds[i] = ferryCmd(t, srv, args...)
			if i == 0 {
				cmds[i].Env = append(cmds[i].Env, "FERRY_PEER_TOKEN_FILE="+tokenFile)
			} else if env != "" {
				cmds[i].Env = append(cmds[i].Env, env)
			}
			cmds[i].Stdout, cmds[i].Stderr = &outs[i], &errs[i]
			if err := cmds[i].Start(); err != nil {
				t.Fatal(err)
			}
		}
		for i := range 2 {
			if err := cmds[i].Wait(); err != nil {
				t.Fatalf("restore %d: %v\n%s", i, err, errs[i].String())
			}
			var sum restoreSummary
			decodeJSON(t, outs[i].String(), &sum)
			if sum.Peers == nil || sum.Files != 2 {
				t.Fatalf("restore %d: %+v", i, sum)
			}
			joined[i], stderr[i] = sum.Peers.Joined, errs[i].String()
		}
		return joined, stderr
	}
	if joined, _ := pair(nil, "FERRY_PEER_TOKEN=job-secret"); joined != [2]int{1, 1} {
		t.Fatalf("file and environment with one secret: joined %v, want 1 each", joined)
	}
	joined, stderr := pair([]string{"--peer-token", "job-secret"}, "")
	if joined != [2]int{1, 1} {
		t.Fatalf("file and command line with one secret: joined %v, want 1 each", joined)
	}
	if !strings.Contains(stderr[1], "--peer-token on the command line") || !strings.Contains(stderr[1], "ps") {
		t.Fatalf("no warning that --peer-token shows in ps:\n%s", stderr[1])
	}
	if strings.Contains(stderr[1], "job-secret") || strings.Contains(stderr[0], "job-secret") {
		t.Fatal("the secret is in the log")
	}
	if joined, _ := pair(nil, "FERRY_PEER_TOKEN=another-secret"); joined != [2]int{0, 0} {
		t.Fatalf("different secrets: joined %v, want none", joined)
	}
	empty := filepath.Join(dir, "empty")
	writeFile(t, empty, nil)
	for _, args := range [][]string{
		{"--peer-token-file", filepath.Join(dir, "missing")},
		{"--peer-token-file", empty},
		{"--peer-token-file", tokenFile, "--peer-token", "x"},
	} {
		r := ferry(t, srv, append([]string{"restore", "--from", url, "--to", t.TempDir(), "--peers", "a,b", "--peer-rank", "0"}, args...)...).must(t, exitUsage)
		if strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 || !strings.Contains(r.stderr, "--peer-token") {
			t.Errorf("restore %v: want a one-line error naming the flag, got %q", args, r.stderr)
		}
	}
}
