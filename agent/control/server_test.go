package control

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
)

// fakeController serves a fixed status; its Flush reports the context it
// got and answers from flush, or waits for the context when flush is nil.
type fakeController struct {
	status  Status
	flush   func(ctx context.Context) ([]int64, error)
	flushed chan context.Context
}

func (f *fakeController) Status() Status { return f.status }

func (f *fakeController) Flush(ctx context.Context) ([]int64, error) {
	if f.flushed != nil {
		f.flushed <- ctx
	}
	return f.flush(ctx)
}

// waitThenReport returns a Flush that blocks until its context ends and
// then reports steps as not committed, as the agent does.
func waitThenReport(steps ...int64) func(context.Context) ([]int64, error) {
	return func(ctx context.Context) ([]int64, error) {
		<-ctx.Done()
		return steps, ctx.Err()
	}
}

// startControl binds a control socket in a new state dir and serves c
// until the test ends; it returns the state dir and a channel with
// Serve's result.
func startControl(t *testing.T, c Controller) (string, <-chan error) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "state")
	return dir, serveIn(t, dir, c)
}

func serveIn(t *testing.T, dir string, c Controller) <-chan error {
	t.Helper()
	s, err := Listen(SocketPath(dir), zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, c) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return done
}

func testStatus() Status {
	t0 := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	return Status{
		Watch: "/ckpt", Destination: "s3://bucket/run", Layout: "dcp", Started: t0,
		Steps: []StepStatus{
			{Step: 100, State: StateCommitted, Files: 3, Bytes: 300, BytesSent: 300, Detected: t0, Committed: t0.Add(time.Minute)},
			{Step: 200, State: StateFailed, Files: 3, Bytes: 300, BytesSent: 10, Detected: t0, Attempts: 2, Error: "upload part 1: connection reset"},
		},
		LastCommitted: 100, BytesSent: 310, Rate: 12.5, LastError: "upload part 1: connection reset",
		Requests: map[string]int64{"UploadPart": 7},
	}
}

func TestControlStatusRoundTrip(t *testing.T) {
	want := testStatus()
	dir, _ := startControl(t, &fakeController{status: want})
	got, err := Dial(dir).Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("status = %+v\nwant %+v", got, want)
	}
}

func TestControlFlushCommitted(t *testing.T) {
	fc := &fakeController{
		flush:   func(context.Context) ([]int64, error) { return nil, nil },
		flushed: make(chan context.Context, 1),
	}
	dir, _ := startControl(t, fc)
	steps, err := Dial(dir).Flush(context.Background(), 15*time.Minute)
	if err != nil || len(steps) != 0 {
		t.Fatalf("Flush = %v, %v; want nothing left", steps, err)
	}
	ctx := <-fc.flushed
	deadline, ok := ctx.Deadline()
	if !ok || time.Until(deadline) > 15*time.Minute {
		t.Fatalf("the agent's Flush got deadline %v (set %v), want one within the 15m timeout", deadline, ok)
	}
}

func TestControlFlushTimeout(t *testing.T) {
	dir, _ := startControl(t, &fakeController{flush: waitThenReport(300, 400)})
	steps, err := Dial(dir).Flush(context.Background(), 50*time.Millisecond)
	if !reflect.DeepEqual(steps, []int64{300, 400}) {
		t.Fatalf("not committed = %v, want [300 400]", steps)
	}
	var nc *NotCommittedError
	if !errors.As(err, &nc) || !reflect.DeepEqual(nc.Steps, steps) {
		t.Fatalf("err = %v, want a *NotCommittedError naming the steps", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "300, 400") || !strings.Contains(msg, "timed out") {
		t.Fatalf("error %q should name the steps and the timeout", msg)
	}
}

func TestControlFlushError(t *testing.T) {
	fc := &fakeController{flush: func(context.Context) ([]int64, error) {
		return []int64{7}, errors.New("commit step 7: access denied")
	}}
	dir, _ := startControl(t, fc)
	steps, err := Dial(dir).Flush(context.Background(), 0)
	if !reflect.DeepEqual(steps, []int64{7}) || err == nil || !strings.Contains(err.Error(), "access denied") {
		t.Fatalf("Flush = %v, %v; want step 7 and the agent's error", steps, err)
	}
}

// A client that gives up (Ctrl-C on `ferry flush`) ends the agent's wait.
func TestControlFlushClientDisconnect(t *testing.T) {
	fc := &fakeController{flush: waitThenReport(1), flushed: make(chan context.Context, 1)}
	dir, _ := startControl(t, fc)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := Dial(dir).Flush(ctx, 0)
		errc <- err
	}()
	flushCtx := <-fc.flushed
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("client Flush err = %v, want context.Canceled", err)
	}
	select {
	case <-flushCtx.Done():
	case <-time.After(time.Minute):
		t.Fatal("the agent's Flush context did not end after the client left")
	}
}

// Stopping the server answers a flush in progress, returns nil and
// removes the socket.
func TestControlShutdown(t *testing.T) {
	fc := &fakeController{flush: waitThenReport(5), flushed: make(chan context.Context, 1)}
	dir := filepath.Join(t.TempDir(), "state")
	s, err := Listen(SocketPath(dir), zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, fc) }()
	type result struct {
		steps []int64
		err   error
	}
	res := make(chan result, 1)
	go func() {
		steps, err := Dial(dir).Flush(context.Background(), 0)
		res <- result{steps, err}
	}()
	<-fc.flushed
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve = %v, want nil on cancel", err)
	}
	r := <-res
	if !reflect.DeepEqual(r.steps, []int64{5}) || r.err == nil || !strings.Contains(r.err.Error(), "stopping") {
		t.Fatalf("flush in progress got %v, %v; want step 5 not committed because the agent stops", r.steps, r.err)
	}
	if _, err := os.Lstat(SocketPath(dir)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket still there after Serve returned: %v", err)
	}
	_, err = Dial(dir).Status(context.Background())
	if !errors.Is(err, ErrNoAgent) {
		t.Fatalf("status after shutdown: %v, want ErrNoAgent", err)
	}
}

func TestControlPermissions(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	serveIn(t, dir, &fakeController{})
	for path, want := range map[string]os.FileMode{SocketPath(dir): 0o600, dir: 0o700} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("%s mode %v, want %v", path, got, want)
		}
	}
}

func TestControlSecondAgentRefused(t *testing.T) {
	want := testStatus()
	dir, _ := startControl(t, &fakeController{status: want})
	_, err := Listen(SocketPath(dir), zaptest.NewLogger(t))
	if !errors.Is(err, ErrAgentRunning) || !strings.Contains(err.Error(), "another ferry agent is running with state dir "+dir) {
		t.Fatalf("second Listen: %v, want ErrAgentRunning naming %s", err, dir)
	}
	// The first agent still answers: the refused one left its socket alone.
	got, err := Dial(dir).Status(context.Background())
	if err != nil || got.Destination != want.Destination {
		t.Fatalf("first agent after the refusal: %+v, %v", got, err)
	}
}

func TestControlStaleSocketReplaced(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	// A socket file nobody listens on, as a SIGKILLed agent leaves.
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: SocketPath(dir), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
	if _, err := Dial(dir).Status(context.Background()); !errors.Is(err, ErrNoAgent) {
		t.Fatalf("status on a stale socket: %v, want ErrNoAgent", err)
	}
	serveIn(t, dir, &fakeController{status: testStatus()})
	if _, err := Dial(dir).Status(context.Background()); err != nil {
		t.Fatalf("status after replacing the stale socket: %v", err)
	}
}

func TestControlRefusesNonSocket(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(SocketPath(dir), []byte("keep me"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Listen(SocketPath(dir), zaptest.NewLogger(t))
	if err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("Listen over a regular file: %v, want a refusal", err)
	}
	if b, _ := os.ReadFile(SocketPath(dir)); string(b) != "keep me" {
		t.Fatal("the regular file was changed")
	}
}

func TestControlNoAgent(t *testing.T) {
	dir := t.TempDir()
	for name, call := range map[string]func(*Client) error{
		"status": func(c *Client) error { _, err := c.Status(context.Background()); return err },
		"flush":  func(c *Client) error { _, err := c.Flush(context.Background(), time.Minute); return err },
	} {
		err := call(Dial(dir))
		want := "no ferry agent is running with state dir " + dir + " (socket " + SocketPath(dir) + ")"
		if !errors.Is(err, ErrNoAgent) || err.Error() != want {
			t.Errorf("%s without an agent: %v, want %q", name, err, want)
		}
	}
}

func TestControlBadTimeout(t *testing.T) {
	dir, _ := startControl(t, &fakeController{})
	cl := Dial(dir)
	var v flushResponse
	err := cl.do(context.Background(), "POST", "/flush?timeout=soon", &v)
	if err == nil || !strings.Contains(err.Error(), "400") {
		t.Fatalf("flush?timeout=soon: %v, want 400", err)
	}
}

// committer is a fakeController that takes commits.
type committer struct {
	fakeController
	got chan string
	err error
}

func (c *committer) Commit(ctx context.Context, n int64, paths []string, wait bool) error {
	c.got <- fmt.Sprintf("%d %v %v", n, paths, wait)
	return c.err
}

// ferry commit's request reaches the agent with the step, the paths and
// whether to wait, and the agent's error comes back as it said it; an
// agent that takes no commits says so.
func TestCommitRequest(t *testing.T) {
	c := &committer{got: make(chan string, 1)}
	dir, _ := startControl(t, c)
	cl := Dial(dir)
	if err := cl.Commit(context.Background(), 12, []string{"step-12", "extra.pt"}, true, time.Minute); err != nil {
		t.Fatal(err)
	}
	if got := <-c.got; got != "12 [step-12 extra.pt] true" {
		t.Errorf("agent got %q", got)
	}
	c.err = errors.New("commit step 13: no step 13 on disk in /ckpt")
	if err := cl.Commit(context.Background(), 13, nil, false, 0); err == nil || err.Error() != c.err.Error() {
		t.Errorf("error %v, want the agent's", err)
	}
	if got := <-c.got; got != "13 [] false" {
		t.Errorf("agent got %q", got)
	}
	plain, _ := startControl(t, &fakeController{})
	if err := Dial(plain).Commit(context.Background(), 1, nil, true, 0); err == nil || !strings.Contains(err.Error(), "does not take commits") {
		t.Errorf("agent without commits: %v", err)
	}
}
