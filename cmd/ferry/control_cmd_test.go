package main

import (
	"context"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/ferrylabs/ferry/agent"
	"github.com/ferrylabs/ferry/agent/control"
	"github.com/ferrylabs/ferry/agent/detect"
)

// fakeAgent is a Controller with a fixed status; flush answers ferry flush
// (nil: wait until the request's context ends, then report stuck).
type fakeAgent struct {
	status control.Status
	flush  func(ctx context.Context) ([]int64, error)
	stuck  []int64
}

func (f *fakeAgent) Status() control.Status { return f.status }

func (f *fakeAgent) Flush(ctx context.Context) ([]int64, error) {
	if f.flush != nil {
		return f.flush(ctx)
	}
	<-ctx.Done()
	return f.stuck, ctx.Err()
}

// serveAgent serves c on the control socket of a new state dir until the
// test ends, as a running `ferry agent` would.
func serveAgent(t *testing.T, c control.Controller) string {
	t.Helper()
	base := filepath.Join(t.TempDir(), "state")
	st := c.Status()
	id := agent.Identity{Destination: st.Destination, Watch: st.Watch}
	dir := agent.AgentStateDir(base, id)
	s, err := control.Listen(control.SocketPath(dir), zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := agent.ClaimStateDir(dir, id); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, c) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return base
}

func agentStatus() control.Status {
	t0 := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	return control.Status{
		Watch: "/ckpt", Destination: "s3://bucket/run", Layout: "dcp", Started: t0,
		StateDir: "/state/agents/0123456789abcdef", MetricsAddr: "127.0.0.1:40123",
		Steps: []control.StepStatus{
			{Step: 1200, State: control.StateCommitted, Files: 3, Bytes: 3 << 30, BytesSent: 3 << 30, Detected: t0, Committed: t0.Add(90 * time.Second)},
			{Step: 1300, State: control.StateUploading, Files: 3, Bytes: 3 << 30, BytesSent: 1 << 30, Detected: t0.Add(time.Hour)},
			{Step: 1400, State: control.StateFailed, Files: 3, Bytes: 3 << 30, Detected: t0.Add(2 * time.Hour), Attempts: 2, Error: "upload part 4:\nconnection reset"},
		},
		Settling:      []detect.Pending{{Step: 1500, Files: 3, Bytes: 3 << 30, State: "settling", Reason: "unchanged for 2s of 5s", Since: t0.Add(3 * time.Hour)}},
		LastCommitted: 1200, BytesSent: 4 << 30, Rate: 200 << 20, RateWindowSeconds: 60, LastError: "upload part 4: connection reset",
		Requests: map[string]int64{"UploadPart": 64},
	}
}

func TestStatusCommand(t *testing.T) {
	want := agentStatus()
	dir := serveAgent(t, &fakeAgent{status: want})

	out := ferry(t, nil, "status", "--state-dir", dir).must(t, 0).stdout
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) != 8 {
		t.Fatalf("want header, state line, last error, table head, a settling step and 3 rows; got:\n%s", out)
	}
	if f := strings.Fields(lines[4]); len(f) < 6 || f[0] != "1500" || f[1] != "settling" || !strings.HasSuffix(lines[4], "unchanged for 2s of 5s") {
		t.Errorf("settling row: %q", lines[4])
	}
	lines = append(lines[:4], lines[5:]...)
	if !containsAll(lines[0], "/ckpt -> s3://bucket/run", "last committed 1200", "rate 200.0 MiB/s (last 60s)", "sent 4.0 GiB") {
		t.Errorf("header line: %q", lines[0])
	}
	if lines[1] != "state /state/agents/0123456789abcdef  metrics 127.0.0.1:40123" {
		t.Errorf("state line: %q", lines[1])
	}
	lines = append(lines[:1], lines[2:]...)
	if lines[1] != "last error: upload part 4: connection reset" {
		t.Errorf("last error line: %q", lines[1])
	}
	if f := strings.Fields(lines[2]); !reflect.DeepEqual(f, []string{"STEP", "STATE", "FILES", "BYTES", "SENT", "DETECTED", "COMMITTED", "ERROR"}) {
		t.Errorf("table head: %q", lines[2])
	}
	for i, want := range [][]string{
		{"1200", "committed", "3", "3.0 GiB", "3.0 GiB", "+1m30s"},
		{"1300", "uploading", "3", "3.0 GiB", "1.0 GiB", " - "},
		{"1400", "failed", "3", "3.0 GiB", "0 B", "attempt 2: upload part 4: connection reset"},
	} {
		if row := lines[3+i]; !strings.HasPrefix(row, want[0]) || !containsAll(row, want[1:]...) {
			t.Errorf("row %d = %q, want %q", i, row, want)
		}
	}

	// --json is the agent's Status as is; the environment names the
	// state dir as well as the flag.
	cmd := ferryCmd(t, nil, "status", "--json")
	cmd.Env = append(cmd.Env, "FERRY_STATE_DIR="+dir)
	var got control.Status
	decodeJSON(t, run(t, cmd).must(t, 0).stdout, &got)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("status --json = %+v\nwant %+v", got, want)
	}
}

func TestStatusCommandNoSteps(t *testing.T) {
	st := control.Status{Watch: "/ckpt", Destination: "s3://b/p", Started: time.Now(), LastCommitted: -1}
	dir := serveAgent(t, &fakeAgent{status: st})
	out := ferry(t, nil, "status", "--state-dir", dir).must(t, 0).stdout
	if !containsAll(out, "last committed none", "no complete step seen yet") {
		t.Fatalf("status of an idle agent:\n%s", out)
	}
}

func TestFlushCommand(t *testing.T) {
	st := agentStatus()
	st.Steps = st.Steps[:1]
	st.LastError = ""
	dir := serveAgent(t, &fakeAgent{status: st, flush: func(ctx context.Context) ([]int64, error) {
		if _, ok := ctx.Deadline(); !ok {
			t.Error("the agent's Flush got no deadline from --timeout")
		}
		return nil, nil
	}})
	r := ferry(t, nil, "flush", "--state-dir", dir, "--timeout", "1h").must(t, 0)
	if strings.TrimSpace(r.stdout) != "1 step committed (last committed step 1200): /ckpt -> s3://bucket/run" {
		t.Fatalf("flush printed %q", r.stdout)
	}

	st = agentStatus()
	st.Steps[1].State, st.Steps[2].State = control.StateCommitted, control.StateAbandoned
	dir = serveAgent(t, &fakeAgent{status: st, flush: func(context.Context) ([]int64, error) { return nil, nil }})
	r = ferry(t, nil, "flush", "--state-dir", dir).must(t, 0)
	if !strings.HasPrefix(r.stdout, "all 2 steps committed") || !strings.Contains(r.stdout, "1 abandoned") {
		t.Fatalf("flush printed %q", r.stdout)
	}
}

func TestFlushCommandNotCommitted(t *testing.T) {
	dir := serveAgent(t, &fakeAgent{status: agentStatus(), stuck: []int64{1300, 1400}})
	r := ferry(t, nil, "flush", "--state-dir", dir, "--timeout", "100ms").must(t, 1)
	if r.stdout != "" {
		t.Errorf("stdout %q, want nothing", r.stdout)
	}
	want := "ferry: 2 steps are not committed: 1300, 1400 (flush timed out after 100ms)\n"
	if r.stderr != want {
		t.Fatalf("stderr %q, want %q", r.stderr, want)
	}
}

func TestControlCommandsWithoutAgent(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	for _, args := range [][]string{{"status"}, {"status", "--json"}, {"flush"}} {
		r := ferry(t, nil, append(args, "--state-dir", dir)...).must(t, 1)
		want := "ferry: no ferry agent is running with state dir " + dir + "\n"
		if r.stderr != want {
			t.Errorf("%v: stderr %q, want %q", args, r.stderr, want)
		}
	}
}

func TestControlCommandsUsage(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"flush", "--timeout", "-1s"},
		{"flush", "--timeout", "soon"},
		{"flush", "extra"},
		{"status", "extra"},
	} {
		ferry(t, nil, append(args, "--state-dir", dir)...).must(t, 2)
	}
}
