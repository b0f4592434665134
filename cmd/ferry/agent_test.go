package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/agent"
	"github.com/ferrylabs/ferry/agent/control"
	"github.com/ferrylabs/ferry/internal/priority"
	"github.com/ferrylabs/ferry/internal/remote"
	"github.com/ferrylabs/ferry/internal/s3test"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/internal/trainsim"
	"github.com/ferrylabs/ferry/manifest"
	"github.com/ferrylabs/ferry/restore"
)

// countingProxy forwards to the S3 server and counts the request body bytes
// it sees and the successful manifest writes, so tests measure what was sent.
type countingProxy struct {
	URL            string
	bodyBytes      atomic.Int64
	manifestWrites atomic.Int64
	srv            *http.Server
}

func startCountingProxy(t *testing.T, target string) *countingProxy {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	p := &countingProxy{}
	rp := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
		pr.SetURL(u)
		pr.Out.Host = pr.In.Host // keep the Host the client signed
	}}
	rp.ModifyResponse = func(resp *http.Response) error {
		r := resp.Request
		if r.Method == http.MethodPut && strings.Contains(r.URL.Path, "/manifests/") && resp.StatusCode == http.StatusOK {
			p.manifestWrites.Add(1)
		}
		return nil
	}
	p.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil {
			r.Body = &countingBody{r: r.Body, n: &p.bodyBytes}
		}
		rp.ServeHTTP(w, r)
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.URL = "http://" + ln.Addr().String()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = p.srv.Serve(ln) }()
	t.Cleanup(func() { p.srv.Close(); wg.Wait() })
	return p
}

type countingBody struct {
	r io.ReadCloser
	n *atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.n.Add(int64(n))
	return n, err
}

func (b *countingBody) Close() error { return b.r.Close() }

// agentEnv is the environment of a ferry agent talking to the server
// through endpoint.
func agentEnv(srv *s3test.Server, endpoint string) []string {
	var env []string
	for _, kv := range srv.Env() {
		if !strings.HasPrefix(kv, "S3_ENDPOINT_URL=") {
			env = append(env, kv)
		}
	}
	return append(env, "S3_ENDPOINT_URL="+endpoint)
}

// agentProcess is a `ferry agent` subprocess and its combined output.
type agentProcess struct {
	*exec.Cmd
	logs *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func startAgentProcess(t *testing.T, env []string, args ...string) *agentProcess {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"agent"}, args...)...)
	cmd.Env = append([]string{"FERRY_CLI_MAIN=1", "PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), testPriority}, env...)
	logs := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
		if t.Failed() {
			t.Logf("agent output:\n%s", logs.String())
		}
	})
	return &agentProcess{Cmd: cmd, logs: logs}
}

func committed(t *testing.T, st store.Store, prefix string) []int64 {
	t.Helper()
	steps, err := remote.Steps(context.Background(), st, prefix, 0)
	if err != nil {
		t.Fatal(err)
	}
	return steps
}

func TestAgentSurvivesSIGKILL(t *testing.T) {
	srv := s3test.Shared(t)
	bucket := srv.NewBucket(t)
	st := srv.Store(t, bucket)
	proxy := startCountingProxy(t, srv.Endpoint)
	env := agentEnv(srv, proxy.URL)
	watch, state := t.TempDir(), t.TempDir()
	sim := trainsim.Options{Dir: watch, Ranks: 2, FileSize: 16 << 20, Seed: 5}
	steps := []int64{100, 200, 300}
	for _, s := range steps {
		if err := trainsim.WriteStep(context.Background(), sim, s); err != nil {
			t.Fatal(err)
		}
	}
	const total = 3 * 2 * 16 << 20
	args := []string{"--watch", watch, "--to", "s3://" + bucket + "/run", "--state-dir", state, "--layout", "composer",
		"--settle", "300ms", "--expected-ranks", "2", "--part-size", "5MiB", "--concurrency", "2", "--metrics-addr", "off"}

	// Three runs killed mid-upload, each after it sent another 20 MiB.
	for i := 0; i < 3; i++ {
		before := proxy.bodyBytes.Load()
		cmd := startAgentProcess(t, env, append(args, "--bandwidth", "16MiB/s")...)
		waitFor(t, "20 MiB more uploaded", 60*time.Second, func() bool { return proxy.bodyBytes.Load()-before >= 20<<20 })
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()
		if err := checkCommittedComplete(st, "run"); err != nil {
			t.Fatalf("after kill %d: %v", i+1, err)
		}
	}
	cmd := startAgentProcess(t, env, args...)
	waitFor(t, "all steps committed", 90*time.Second, func() bool { return len(committed(t, st, "run")) == len(steps) })
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := waitExit(t, cmd.Cmd, 2*time.Minute); err != nil {
		t.Fatalf("agent after SIGTERM: %v", err)
	}
	if n := proxy.manifestWrites.Load(); n != int64(len(steps)) {
		t.Errorf("%d manifest writes succeeded, want exactly %d (one per step)", n, len(steps))
	}
	sent := proxy.bodyBytes.Load()
	t.Logf("bytes sent over 4 runs: %d (%.2fx the checkpoint bytes)", sent, float64(sent)/total)
	limit, why := int64(total*3/2), "resumption should keep it under 1.5x"
	if srv.Kind() == s3test.SeaweedFS {
		// Its ListParts leaves out the parts' checksums, so the parts of
		// an upload cut by a kill are sent again (docs/compatibility.md):
		// at most what each of the 3 killed runs sent, plus a part in
		// flight per connection.
		limit, why = total+3*(20<<20+2*5<<20), "without resumed parts, at most what the killed runs sent again"
	}
	if sent > limit {
		t.Errorf("sent %d bytes for %d bytes of checkpoints: %s", sent, total, why)
	}
	for _, s := range steps {
		dst := t.TempDir()
		if _, err := restore.Restore(context.Background(), restore.Options{Store: st, Prefix: "run", Dir: dst, Step: s}); err != nil {
			t.Fatalf("restore step %d: %v", s, err)
		}
		for r := 0; r < 2; r++ {
			got, _ := os.ReadFile(filepath.Join(dst, trainsim.FileName(0, s, r)))
			if !bytes.Equal(got, trainsim.Content(5, s, r, sim.FileSize)) {
				t.Errorf("step %d rank %d: restored bytes differ", s, r)
			}
		}
	}
}

func TestAgentSIGTERMDrains(t *testing.T) {
	srv := s3test.Shared(t)
	bucket := srv.NewBucket(t)
	st := srv.Store(t, bucket)
	proxy := startCountingProxy(t, srv.Endpoint)
	watch := t.TempDir()
	cmd := startAgentProcess(t, agentEnv(srv, proxy.URL), "--watch", watch, "--to", "s3://"+bucket+"/run", "--state-dir", t.TempDir(),
		"--layout", "composer", "--settle", "300ms", "--expected-ranks", "1", "--part-size", "5MiB", "--bandwidth", "8MiB/s", "--metrics-addr", "off")
	sim := trainsim.Options{Dir: watch, Ranks: 1, FileSize: 24 << 20, Seed: 6}
	if err := trainsim.WriteStep(context.Background(), sim, 11); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the upload to start", 30*time.Second, func() bool { return proxy.bodyBytes.Load() > 1<<20 })
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := waitExit(t, cmd.Cmd, 2*time.Minute); err != nil {
		t.Fatalf("agent exit after SIGTERM: %v, want 0", err)
	}
	if got := committed(t, st, "run"); len(got) != 1 || got[0] != 11 {
		t.Fatalf("after the drain committed = %v, want [11]", got)
	}
}

// TestAgentSecondSignalAborts: a second SIGTERM during the drain stops the
// agent at once, the step uncommitted and its upload state on disk; the
// next start resumes it and commits it.
func TestAgentSecondSignalAborts(t *testing.T) {
	srv := s3test.Shared(t)
	bucket := srv.NewBucket(t)
	st := srv.Store(t, bucket)
	proxy := startCountingProxy(t, srv.Endpoint)
	watch, state := t.TempDir(), t.TempDir()
	args := []string{"--watch", watch, "--to", "s3://" + bucket + "/run", "--state-dir", state,
		"--layout", "composer", "--settle", "300ms", "--expected-ranks", "1", "--part-size", "5MiB", "--metrics-addr", "off"}
	cmd := startAgentProcess(t, agentEnv(srv, proxy.URL), append(args, "--bandwidth", "4MiB/s")...)
	sim := trainsim.Options{Dir: watch, Ranks: 1, FileSize: 40 << 20, Seed: 7}
	if err := trainsim.WriteStep(context.Background(), sim, 12); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the upload to start", 30*time.Second, func() bool { return proxy.bodyBytes.Load() > 1<<20 })
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the drain has begun
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err := waitExit(t, cmd.Cmd, time.Minute)
	if took := time.Since(start); took > 20*time.Second {
		t.Fatalf("agent took %v to stop after the second signal (exit %v)", took, err)
	}
	if got := committed(t, st, "run"); len(got) != 0 {
		t.Fatalf("committed %v after an aborted drain of a 40 MiB step at 4 MiB/s", got)
	}
	again := startAgentProcess(t, agentEnv(srv, proxy.URL), args...)
	waitFor(t, "step 12 committed after the restart", 60*time.Second, func() bool { return len(committed(t, st, "run")) == 1 })
	if err := again.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := waitExit(t, again.Cmd, 2*time.Minute); err != nil {
		t.Fatalf("agent exit after SIGTERM: %v, want 0", err)
	}
}

func TestSecondAgentOnSameStateDirFails(t *testing.T) {
	srv := s3test.Shared(t)
	bucket := srv.NewBucket(t)
	watch, state := t.TempDir(), t.TempDir()
	args := []string{"--watch", watch, "--to", "s3://" + bucket + "/run", "--state-dir", state, "--metrics-addr", "off"}
	first := startAgentProcess(t, srv.Env(), args...)
	sock := agentSocket(t, state, watch, "s3://"+bucket+"/run")
	waitFor(t, "the first agent's socket", 30*time.Second, func() bool {
		_, err := os.Stat(sock)
		return err == nil
	})
	done := make(chan result, 1)
	go func() { done <- run(t, ferryCmd(t, srv, append([]string{"agent"}, args...)...)) }()
	select {
	case r := <-done:
		if r.code != 1 || !strings.Contains(r.stderr, "another ferry agent is running") {
			t.Fatalf("second agent: exit %d, stderr %q", r.code, r.stderr)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a second agent on the same state dir did not exit")
	}
	if err := first.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := waitExit(t, first.Cmd, 2*time.Minute); err != nil {
		t.Fatalf("first agent: %v", err)
	}
}

// agentSocket is the control socket of the agent started with these
// --state-dir, --watch and --to values.
func agentSocket(t *testing.T, state, watch, to string) string {
	t.Helper()
	loc, err := manifest.ParseURL(to)
	if err != nil {
		t.Fatal(err)
	}
	return control.SocketPath(agent.AgentStateDir(state, agentIdentity(watch, loc)))
}

// waitExit waits for cmd to exit, killing it and failing t after d: a hung
// agent must fail its test, not stall the whole run.
func waitExit(t *testing.T, cmd *exec.Cmd, d time.Duration) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("process did not exit within %v", d)
		return nil
	}
}

// checkCommittedComplete fails when a committed manifest names an object
// that is missing or of the wrong size.
func checkCommittedComplete(st store.Store, prefix string) error {
	return remote.CheckObjects(context.Background(), st, prefix)
}

// The agent lowers its own priority by default: every thread of the
// running process is SCHED_IDLE (or nice 19) with best-effort I/O level 7,
// read back from /proc and ioprio_get; --priority normal leaves it alone.
func TestAgentLowPriority(t *testing.T) {
	srv := s3test.Shared(t)
	to := "s3://" + srv.NewBucket(t) + "/run"
	for _, mode := range []string{"low", "normal"} {
		watch := t.TempDir()
		a := startAgentProcess(t, append(srv.Env(), "FERRY_PRIORITY="+mode), "--watch", watch, "--to", to, "--state-dir", t.TempDir(), "--metrics-addr", "off")
		waitFor(t, "the agent to start", 30*time.Second, func() bool { return strings.Contains(a.logs.String(), "agent started") })
		ts, err := priority.Threads(a.Process.Pid)
		if err != nil {
			t.Fatal(err)
		}
		for _, th := range ts {
			low := (th.Policy == 5 || th.Nice == 19) && th.IOClass == priority.ClassBestEffort && th.IOLevel == 7
			if low != (mode == "low") {
				t.Errorf("--priority %s: thread %d has policy %d, nice %d, I/O class %d level %d", mode, th.TID, th.Policy, th.Nice, th.IOClass, th.IOLevel)
			}
		}
		if mode == "low" && !containsAll(a.logs.String(), "running at low priority", `"reexecuted": true`) {
			t.Errorf("no log line says the agent runs at low priority:\n%s", a.logs.String())
		}
		if err := a.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if err := waitExit(t, a.Cmd, time.Minute); err != nil {
			t.Fatalf("--priority %s: %v", mode, err)
		}
	}
}
