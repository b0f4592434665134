package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/internal/s3test"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/internal/trainsim"
)

// Three `ferry restore --peers` processes restore one step together: each
// exits 0 with the step byte for byte, and the bucket served each byte
// once between them (their --json counts), with the peers' key derived
// from the shared credentials. Bad peer flags are one-line usage errors.
func TestCLIRestoreWithPeers(t *testing.T) {
	srv := s3test.Shared(t)
	url := "s3://" + srv.NewBucket(t) + "/run"
	src := t.TempDir()
	sizes := []int{9<<20 + 7, 4 << 20, 1000}
	var total int64
	for i, n := range sizes {
		writeFile(t, filepath.Join(src, fmt.Sprintf("rank%d.pt", i)), randomBytes(n, byte(i)))
		total += int64(n)
	}
	// Peers exchange objects; packed files are read from the bucket.
	ferry(t, srv, "push", "--to", url, "--step", "5", "--pack=false", src).must(t, 0)

	var addrs []string
	for range 3 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addrs = append(addrs, ln.Addr().String())
		ln.Close()
	}
	// Once with the list given, once with the nodes finding each other
	// through the bucket, over TLS.
	restoreTogether := func(args func(i int) []string) {
		t.Helper()
		type proc struct {
			dir      string
			out, err bytes.Buffer
		}
		procs := make([]*proc, 3)
		var waits []func() error
		for i := range procs {
			p := &proc{dir: filepath.Join(t.TempDir(), "ckpt")}
			procs[i] = p
			cmd := ferryCmd(t, srv, append([]string{"restore", "--from", url, "--to", p.dir, "--json"}, args(i)...)...)
			cmd.Stdout, cmd.Stderr = &p.out, &p.err
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			waits = append(waits, cmd.Wait)
		}
		var bucket, fromPeers int64
		for i, wait := range waits {
			p := procs[i]
			if err := wait(); err != nil {
				t.Fatalf("restore %d: %v\nstdout: %s\nstderr: %s", i, err, p.out.String(), p.err.String())
			}
			var sum restoreSummary
			decodeJSON(t, p.out.String(), &sum)
			if sum.Peers == nil || sum.Peers.Joined != 2 || len(sum.Peers.Dropped) != 0 {
				t.Fatalf("restore %d: peers %+v\nstderr: %s", i, sum.Peers, p.err.String())
			}
			bucket += sum.Peers.BucketBytes
			fromPeers += sum.Peers.PeerBytes
			for j := range sizes {
				name := fmt.Sprintf("rank%d.pt", j)
				want, _ := os.ReadFile(filepath.Join(src, name))
				got, err := os.ReadFile(filepath.Join(p.dir, name))
				if err != nil || !bytes.Equal(got, want) {
					t.Fatalf("restore %d: %s differs from what was pushed (%v)", i, name, err)
				}
			}
		}
		if bucket != total || fromPeers != 2*total {
			t.Fatalf("the bucket served %d bytes and the peers %d; the step has %d", bucket, fromPeers, total)
		}
	}
	restoreTogether(func(i int) []string {
		return []string{"--peers", strings.Join(addrs, ","), "--peer-rank", fmt.Sprint(i), "--peer-listen", addrs[i]}
	})
	restoreTogether(func(i int) []string {
		return []string{"--peers", "bucket:3", "--peer-group", "job-42", "--peer-listen", addrs[i], "--peer-tls"}
	})
	st := srv.Store(t, strings.TrimSuffix(strings.TrimPrefix(url, "s3://"), "/run"))
	err := st.List(t.Context(), "run/peers/", "", 0, func(o store.ObjectInfo) error {
		return fmt.Errorf("announcement %s left in the bucket", o.Key)
	})
	if err != nil {
		t.Fatal(err)
	}

	for _, args := range [][]string{
		{"--peer-rank", "1"},
		{"--peers", "a,b", "--peer-listen", "nonsense"},
		{"--peers", "a,b", "--peer-rank", "2"},
		{"--peers", "a,b", "--peer-wait", "0s"},
		{"--peers", "bucket:3"},
		{"--peers", "bucket:x", "--peer-group", "g"},
		{"--peers", "bucket:2", "--peer-group", "../etc"},
	} {
		r := ferry(t, srv, append([]string{"restore", "--from", url, "--to", t.TempDir()}, args...)...).must(t, exitUsage)
		if strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Errorf("restore %v: want a one-line error, got %q", args, r.stderr)
		}
	}
}

// `ferry agent --serve-peers`: a node that restores the step the agent
// committed, with the agent among its --peers, reads none of its bytes from
// the bucket (the survivors' agents serve a replacement node).
func TestCLIAgentServesPeers(t *testing.T) {
	srv := s3test.Shared(t)
	bucket := srv.NewBucket(t)
	url := "s3://" + bucket + "/run"
	var addrs []string
	for range 2 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addrs = append(addrs, ln.Addr().String())
		ln.Close()
	}
	watch := t.TempDir()
	agent := startAgentProcess(t, srv.Env(), "--watch", watch, "--to", url, "--state-dir", t.TempDir(),
		"--layout", "composer", "--settle", "300ms", "--expected-ranks", "2", "--metrics-addr", "off", "--serve-peers", addrs[1])
	sim := trainsim.Options{Dir: watch, Ranks: 2, FileSize: 6<<20 + 3, Seed: 9}
	if err := trainsim.WriteStep(context.Background(), sim, 4); err != nil {
		t.Fatal(err)
	}
	st := srv.Store(t, bucket)
	waitFor(t, "step 4 to be committed", time.Minute, func() bool { return len(committed(t, st, "run")) == 1 })

	out := filepath.Join(t.TempDir(), "ckpt")
	r := ferry(t, srv, "restore", "--from", url, "--to", out, "--json",
		"--peers", strings.Join(addrs, ","), "--peer-rank", "0", "--peer-listen", addrs[0]).must(t, 0)
	var sum restoreSummary
	decodeJSON(t, r.stdout, &sum)
	if sum.Peers == nil || sum.Peers.Joined != 1 || sum.Peers.BucketBytes != 0 || sum.Peers.PeerBytes != 2*(6<<20+3) {
		t.Fatalf("restore beside the agent: %+v\nagent: %s", sum.Peers, agent.logs.String())
	}
	ents, _ := os.ReadDir(watch)
	files := 0
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue // Composer's latest-rank links
		}
		files++
		name := e.Name()
		want, _ := os.ReadFile(filepath.Join(watch, name))
		got, err := os.ReadFile(filepath.Join(out, name))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s restored from the agent differs (%v)", name, err)
		}
	}
	if files != 2 {
		t.Fatalf("compared %d files, want the 2 ranks'", files)
	}
	if err := agent.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := waitExit(t, agent.Cmd, time.Minute); err != nil {
		t.Fatalf("agent exit: %v", err)
	}
}
