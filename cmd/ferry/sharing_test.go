package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/ferrylabs/ferry/agent/control"
	"github.com/ferrylabs/ferry/internal/s3proxy"
	"github.com/ferrylabs/ferry/internal/s3test"
	"github.com/ferrylabs/ferry/internal/trainsim"
	"github.com/ferrylabs/ferry/restore"
)

// sharedNodeEnv is the environment of every process of one node in these
// tests: one default state dir (XDG_STATE_HOME) for all jobs, as on a real
// node where each job's agent runs with default flags.
func sharedNodeEnv(t *testing.T, srv *s3test.Server) []string {
	return append(srv.Env(), "XDG_STATE_HOME="+t.TempDir())
}

// jobFerry runs a ferry command with a job's own settings in the
// environment (FERRY_WATCH, FERRY_TO), as a job script does.
func jobFerry(t *testing.T, env []string, watch, to string, args ...string) result {
	t.Helper()
	if watch != "" {
		env = withEnv(env, "FERRY_WATCH="+watch)
	}
	if to != "" {
		env = withEnv(env, "FERRY_TO="+to)
	}
	return ferryEnv(t, env, args...)
}

// waitAgentUp waits until the job's agent answers `ferry status`.
func waitAgentUp(t *testing.T, env []string, watch, to string) {
	t.Helper()
	waitFor(t, "the agent of "+watch+" -> "+to, 30*time.Second, func() bool {
		return jobFerry(t, env, watch, to, "status").code == 0
	})
}

// The state dir of one job must never mark another destination's steps as
// done, and several jobs' agents run side by side on one node with default
// flags; flush and status answer for the job they are run from.
func TestAgentsShareStateDirAndNode(t *testing.T) {
	srv := s3test.Shared(t)
	bucket := srv.NewBucket(t)
	st := srv.Store(t, bucket)
	env := sharedNodeEnv(t, srv)
	common := []string{"--layout", "composer", "--settle", "300ms", "--expected-ranks", "1", "--part-size", "5MiB"}
	watchA, watchC := t.TempDir(), t.TempDir()
	toA, toB, toC := "s3://"+bucket+"/a", "s3://"+bucket+"/b", "s3://"+bucket+"/c"
	sim := trainsim.Options{Dir: watchA, Ranks: 1, FileSize: 3 << 20, Seed: 21}
	if err := trainsim.WriteStep(context.Background(), sim, 100); err != nil {
		t.Fatal(err)
	}

	// Job A commits step 100 to .../a and stops.
	a := startAgentProcess(t, env, append([]string{"--watch", watchA, "--to", toA}, common...)...)
	waitAgentUp(t, env, watchA, toA)
	jobFerry(t, env, watchA, toA, "flush", "--timeout", "1m").must(t, 0)
	if err := a.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := waitExit(t, a.Cmd, time.Minute); err != nil {
		t.Fatalf("agent A: %v", err)
	}

	// Jobs B (same directory, new destination: FERRY_TO changed) and C
	// (its own directory) run at once, both with default flags: the same
	// default state dir and metrics address.
	b := startAgentProcess(t, env, append([]string{"--watch", watchA, "--to", toB}, common...)...)
	c := startAgentProcess(t, env, append([]string{"--watch", watchC, "--to", toC}, common...)...)
	waitAgentUp(t, env, watchA, toB)
	waitAgentUp(t, env, watchC, toC)
	simC := trainsim.Options{Dir: watchC, Ranks: 1, FileSize: 1 << 20, Seed: 22}
	if err := trainsim.WriteStep(context.Background(), simC, 7); err != nil {
		t.Fatal(err)
	}
	if r := jobFerry(t, env, watchA, toB, "flush", "--timeout", "1m").must(t, 0); !strings.Contains(r.stdout, "1 step committed (last committed step 100)") {
		t.Errorf("job B's flush: %q", r.stdout)
	}
	if r := jobFerry(t, env, watchC, "", "flush", "--timeout", "1m").must(t, 0); !strings.Contains(r.stdout, "last committed step 7") {
		t.Errorf("job C's flush (FERRY_WATCH alone): %q", r.stdout)
	}
	// Without a job's settings, flush cannot tell which agent is meant.
	r := jobFerry(t, env, "", "", "flush")
	if r.code != 1 || !strings.Contains(r.stderr, "2 ferry agents run with state dir") || !strings.Contains(r.stderr, "--watch (FERRY_WATCH)") {
		t.Errorf("flush without a job's settings: exit %d, %q", r.code, r.stderr)
	}
	for _, s := range []struct{ to string }{{toB}, {toC}} {
		loc := strings.TrimPrefix(s.to, "s3://"+bucket+"/")
		if got := committed(t, st, loc); len(got) != 1 {
			t.Errorf("%s: committed %v, want one step", s.to, got)
		}
	}
	dst := t.TempDir()
	if _, err := restore.Restore(context.Background(), restore.Options{Store: st, Prefix: "b", Dir: dst, Step: 100}); err != nil {
		t.Fatalf("restore job B's step 100: %v", err)
	}
	got, _ := os.ReadFile(filepath.Join(dst, trainsim.FileName(0, 100, 0)))
	if !bytes.Equal(got, trainsim.Content(21, 100, 0, sim.FileSize)) {
		t.Error("job B's step 100: restored bytes differ")
	}

	// Both serve metrics, on different addresses, and say where.
	var stB, stC control.Status
	decodeJSON(t, jobFerry(t, env, watchA, toB, "status", "--json").must(t, 0).stdout, &stB)
	decodeJSON(t, jobFerry(t, env, "", toC, "status", "--json").must(t, 0).stdout, &stC)
	if stB.Destination != toB || stC.Destination != toC {
		t.Errorf("status answered for %s and %s, want %s and %s", stB.Destination, stC.Destination, toB, toC)
	}
	if stB.MetricsAddr == "" || stC.MetricsAddr == "" || stB.MetricsAddr == stC.MetricsAddr {
		t.Errorf("metrics addresses %q and %q: want two, distinct", stB.MetricsAddr, stC.MetricsAddr)
	}
	if stB.StateDir == stC.StateDir {
		t.Errorf("both agents use state dir %s", stB.StateDir)
	}
	for _, p := range []*agentProcess{b, c} {
		if err := p.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if err := waitExit(t, p.Cmd, time.Minute); err != nil {
			t.Fatalf("agent: %v\n%s", err, p.logs.String())
		}
	}
}

// A taken metrics address the operator chose fails the start, naming it
// (a scraper there would read another process's answers as the agent's);
// the default one taken moves to a free port with a warning naming both.
func TestAgentMetricsAddressTaken(t *testing.T) {
	srv := s3test.Shared(t)
	env := sharedNodeEnv(t, srv)
	watch, to := t.TempDir(), "s3://"+srv.NewBucket(t)+"/run"
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	addr := taken.Addr().String()
	second := startAgentProcess(t, env, "--watch", watch, "--to", to, "--metrics-addr", addr)
	err = waitExit(t, second.Cmd, time.Minute)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("agent with a taken --metrics-addr: %v, want exit 1\n%s", err, second.logs.String())
	}
	if logs := second.logs.String(); !strings.Contains(logs, "metrics address "+addr+" is taken") || !strings.Contains(logs, "--metrics-addr") {
		t.Errorf("no error naming %s and the flag:\n%s", addr, logs)
	}

	// The default address taken: a free port, and a warning naming both.
	reg := prometheus.NewRegistry()
	core, logs := observer.New(zap.WarnLevel)
	m, err := listenMetrics(addr, false, reg, control.Probes{}, zap.New(core))
	if err != nil || m.MetricsServer == nil || m.addr() == addr {
		t.Fatalf("default address taken: %v, serving at %q; want a free port", err, m.addr())
	}
	m.close()
	if w := logs.FilterMessageSnippet("default metrics address taken").All(); len(w) != 1 || w[0].ContextMap()["wanted"] != addr {
		t.Errorf("warnings %v, want one naming %s", logs.All(), addr)
	}
}

// An empty push commits nothing unless --allow-empty says so.
func TestCLIPushEmptyRefused(t *testing.T) {
	srv := s3test.Shared(t)
	bucket := srv.NewBucket(t)
	url := "s3://" + bucket + "/run"
	empty := t.TempDir()
	r := ferry(t, srv, "push", "--to", url, "--step", "2", empty).must(t, 1)
	if line := ferryErrorLine(t, r.stderr); !containsAll(line, "no files found", empty, "--allow-empty") {
		t.Errorf("error line %q", line)
	}
	if got := committed(t, srv.Store(t, bucket), "run"); len(got) != 0 {
		t.Fatalf("committed %v after a refused empty push", got)
	}
	ferry(t, srv, "restore", "--from", url, "--to", t.TempDir()).must(t, 3)
	ferry(t, srv, "push", "--to", url, "--step", "2", "--allow-empty", empty).must(t, 0)
	if got := committed(t, srv.Store(t, bucket), "run"); len(got) != 1 || got[0] != 2 {
		t.Fatalf("committed %v, want [2] with --allow-empty", got)
	}
}

// A push to a missing bucket stops at its first request: nothing is
// uploaded and no resume state is left behind.
func TestCLIPushMissingBucketStopsFirst(t *testing.T) {
	srv := s3test.Shared(t)
	view, px := srv.WithProxy(t, s3proxy.Config{})
	src, state := t.TempDir(), t.TempDir()
	writeFile(t, filepath.Join(src, "model.pt"), randomBytes(12<<20, 5))
	r := ferry(t, view, "push", "--to", "s3://ferry-no-such-bucket/run", "--step", "1", "--part-size", "5MiB", "--state-dir", state, src).must(t, 1)
	if line := ferryErrorLine(t, r.stderr); !containsAll(line, `bucket "ferry-no-such-bucket" does not exist`) {
		t.Errorf("error line %q", line)
	}
	if reqs := px.Requests(); len(reqs) != 1 {
		t.Errorf("%d requests, want 1 (the check for a committed manifest): %v", len(reqs), reqs)
	}
	if left := listTree(t, state); len(left) != 0 {
		t.Errorf("state left behind: %v", left)
	}
}

// status and flush answer at once while the server stalls: the agent does
// its disk and network work outside the lock they need. The stall hits the
// HEAD that --keep-local sends for a step only this node's share of is
// known durable.
func TestControlAnswersWhileServerStalls(t *testing.T) {
	srv := s3test.Shared(t)
	bucket := srv.NewBucket(t)
	view, px := srv.WithProxy(t, s3proxy.Config{Rules: []s3proxy.Rule{
		{Ops: []string{s3proxy.OpHeadObject}, Action: s3proxy.Stall(30 * time.Second)},
	}})
	env := withEnv(view.Env(), "XDG_STATE_HOME="+t.TempDir())
	watch, to := t.TempDir(), "s3://"+bucket+"/run"
	// Node 0 of 2: its steps stay node-done (node 1 never pushes), so
	// keep-local asks the bucket whether the older one was committed.
	startAgentProcess(t, env, "--watch", watch, "--to", to, "--layout", "composer", "--settle", "300ms",
		"--expected-ranks", "1", "--keep-local", "1", "--nodes", "2", "--node-rank", "0", "--metrics-addr", "off")
	waitAgentUp(t, env, watch, to)
	sim := trainsim.Options{Dir: watch, Ranks: 1, FileSize: 1 << 20, Seed: 23}
	for _, s := range []int64{1, 2} {
		if err := trainsim.WriteStep(context.Background(), sim, s); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the stalled HEAD", time.Minute, func() bool {
		for _, q := range px.Requests() {
			if q.Op == s3proxy.OpHeadObject && q.Fault != "" {
				return true
			}
		}
		return false
	})
	start := time.Now()
	jobFerry(t, env, watch, to, "status").must(t, 0)
	if d := time.Since(start); d > time.Second {
		t.Errorf("status took %v while the server stalls, want under 1s", d)
	}
	// Flush looks at the disk again, finds both steps durable (node-done)
	// and answers: --keep-local's stalled bucket check is not waited for.
	start = time.Now()
	jobFerry(t, env, watch, to, "flush", "--timeout", "30s").must(t, 0)
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("flush took %v while the server stalls, want under 2s", d)
	}
}

// Connections are reused: a push of many parts and a restore of many GETs
// open no more connections than requests they run at once. Against R2
// each new connection is a TLS handshake and a cold congestion window.
func TestCLIReusesConnections(t *testing.T) {
	srv := s3test.Shared(t)
	view, px := srv.WithProxy(t, s3proxy.Config{})
	url := "s3://" + srv.NewBucket(t) + "/run"
	src := t.TempDir()
	writeFile(t, filepath.Join(src, "model.pt"), randomBytes(12*5*mib, 51)) // 12 parts
	for i := range 12 {
		writeFile(t, filepath.Join(src, fmt.Sprintf("shard-%02d.pt", i)), randomBytes(300<<10, byte(60+i)))
	}
	const conc = 4
	ferry(t, view, "push", "--quiet", "--to", url, "--step", "1", "--part-size", "5MiB", "--concurrency", fmt.Sprint(conc), src).must(t, 0)
	pushConns, pushMax := px.Conns()
	pushReqs := len(px.Requests())
	px.Reset()
	dst := t.TempDir()
	ferry(t, view, "restore", "--quiet", "--from", url, "--to", dst, "--concurrency", fmt.Sprint(conc)).must(t, 0)
	sameTree(t, src, dst)
	restoreConns, restoreMax := px.Conns()
	t.Logf("push: %d requests over %d connections (%d open at most); restore: %d requests over %d connections (%d at most)",
		pushReqs, pushConns, pushMax, len(px.Requests()), restoreConns, restoreMax)
	if pushConns > conc || restoreConns > conc {
		t.Errorf("push opened %d connections and restore %d for --concurrency %d: connections are not reused", pushConns, restoreConns, conc)
	}
}
