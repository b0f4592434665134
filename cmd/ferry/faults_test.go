package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/internal/s3test"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/internal/trainsim"
	"github.com/ferrylabs/ferry/internal/wanlink"
	"github.com/ferrylabs/ferry/restore"
)

// faultIdle is the agent's idle timeout in the black-hole tests
// (FERRY_S3_IDLE_TIMEOUT; a minute by default), shorter than the holes.
// The other tests run at the default: on loopback, toxiproxy's socket
// takes megabytes into its receive buffer at once, so a part paced at
// 100 kB/s behind it looks acknowledged and silent for tens of seconds,
// which no real link with its queue at the bottleneck does.
const faultIdle = 8 * time.Second

// faultRun is one `ferry agent` uploading a simulated trainer's steps
// through toxiproxy in front of a real S3 server, while a test breaks the
// link. It is never restarted: the agent must recover by itself.
type faultRun struct {
	t      *testing.T
	st     store.Store // direct to the server: what is really there
	bucket string
	link   *wanlink.Proxy
	// through is the endpoint URL through toxiproxy.
	through string
	agent   *supervisedAgent
	state   string
	sim     trainsim.Options
	steps   []int64
}

// startFaultRun starts toxiproxy in front of srv (a direct server, or an
// s3proxy view of one) and an agent behind it. direct reaches the server
// without faults. idle, when not 0, sets the agent's idle timeout; env
// adds to its environment.
func startFaultRun(t *testing.T, srv, direct *s3test.Server, idle time.Duration, env ...string) *faultRun {
	t.Helper()
	return startFaultRunAt(t, srv, direct, idle, "", env...)
}

// startFaultRunAt is startFaultRun with the agent reaching toxiproxy by
// the name host (when not ""), which its resolver must map to 127.0.0.1.
func startFaultRunAt(t *testing.T, srv, direct *s3test.Server, idle time.Duration, host string, env ...string) *faultRun {
	t.Helper()
	link, through := srv.ThroughLink(t, wanlink.Link{})
	if host != "" {
		_, port, _ := net.SplitHostPort(link.Addr)
		through = strings.Replace(through, link.Addr, net.JoinHostPort(host, port), 1)
	}
	bucket := direct.NewBucket(t)
	r := &faultRun{t: t, st: direct.Store(t, bucket), bucket: bucket, link: link, through: through, state: t.TempDir()}
	r.sim = trainsim.Options{Dir: t.TempDir(), Ranks: 2, FileSize: 11<<20 + 4321, Chunk: 1 << 20, Seed: 77}
	env = append(agentEnv(srv, through), append([]string{"FERRY_LOG_LEVEL=debug"}, env...)...)
	if idle != 0 {
		env = append(env, "FERRY_S3_IDLE_TIMEOUT="+idle.String())
	}
	r.agent = startSupervisedAgent(t, env, "--watch", r.sim.Dir, "--to", "s3://"+bucket+"/run", "--state-dir", r.state,
		"--layout", "composer", "--settle", "300ms", "--expected-ranks", "2", "--part-size", "5MiB",
		"--concurrency", "4", "--metrics-addr", "off")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("agent output:\n%s", r.agent.logs.String())
		}
	})
	return r
}

// write has the trainer save step s.
func (r *faultRun) write(s int64) {
	r.t.Helper()
	if err := trainsim.WriteStep(context.Background(), r.sim, s); err != nil {
		r.t.Fatal(err)
	}
	r.steps = append(r.steps, s)
}

func (r *faultRun) isCommitted(s int64) bool {
	return slices.Contains(committed(r.t, r.st, "run"), s)
}

// waitCommitted waits up to d for step s to be committed on the server.
func (r *faultRun) waitCommitted(s int64, d time.Duration) {
	r.t.Helper()
	start := time.Now()
	waitFor(r.t, "step committed", d, func() bool {
		if r.agent.exited() {
			r.t.Fatalf("the agent exited (%v); it must recover without a restart", r.agent.err)
		}
		return r.isCommitted(s)
	})
	r.t.Logf("step %d committed %.1f s after the wait began", s, time.Since(start).Seconds())
}

// notCommittedDuring fails unless step s stays uncommitted for d: the
// fault really held the upload back (else the test proved nothing).
func (r *faultRun) notCommittedDuring(s int64, d time.Duration) {
	r.t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		if r.isCommitted(s) {
			r.t.Fatalf("step %d was committed while the fault was on: the fault did not hit its upload", s)
		}
	}
}

func (r *faultRun) toxic(name, kind, stream string, attrs map[string]any) {
	r.t.Helper()
	if err := r.link.AddToxic(name, kind, stream, attrs); err != nil {
		r.t.Fatal(err)
	}
}

func (r *faultRun) heal(names ...string) {
	r.t.Helper()
	for _, n := range names {
		if err := r.link.RemoveToxic(n); err != nil {
			r.t.Fatal(err)
		}
	}
}

// finish flushes the agent (still the first process), stops it, and checks
// that exactly the written steps are committed, complete, and restore byte
// for byte; it returns the agent's log lines at warn and error, and all
// its log lines.
func (r *faultRun) finish() (problems, all []string) {
	r.t.Helper()
	t := r.t
	if r.agent.exited() {
		t.Fatalf("the agent exited (%v); it must recover without a restart", r.agent.err)
	}
	if res := ferry(t, nil, "flush", "--state-dir", r.state, "--timeout", "2m"); res.code != 0 {
		t.Fatalf("flush: exit %d\nstdout: %s\nstderr: %s", res.code, res.stdout, res.stderr)
	}
	_ = r.agent.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.agent.done:
	case <-time.After(time.Minute):
		t.Fatal("agent still running a minute after SIGTERM")
	}
	if r.agent.err != nil {
		t.Errorf("agent after SIGTERM: %v, want exit 0", r.agent.err)
	}
	got := committed(t, r.st, "run")
	slices.Sort(got)
	if !slices.Equal(got, r.steps) {
		t.Fatalf("committed steps %v, want %v: a step was lost", got, r.steps)
	}
	if err := checkCommittedComplete(r.st, "run"); err != nil {
		t.Fatal(err)
	}
	for _, s := range r.steps {
		dst := t.TempDir()
		if _, err := restore.Restore(context.Background(), restore.Options{Store: r.st, Prefix: "run", Dir: dst, Step: s}); err != nil {
			t.Fatalf("restore step %d: %v", s, err)
		}
		r.sameAsTrainer(dst, s)
	}
	var bad []string
	all = strings.Split(r.agent.logs.String(), "\n")
	for _, line := range all {
		if strings.Contains(line, "\tWARN\t") || strings.Contains(line, "\tERROR\t") || strings.Contains(line, `"level":"warn"`) || strings.Contains(line, `"level":"error"`) {
			bad = append(bad, line)
		}
	}
	return bad, all
}

// sameAsTrainer fails unless dir holds step s's files as the trainer wrote them.
func (r *faultRun) sameAsTrainer(dir string, s int64) {
	r.t.Helper()
	for rank := range r.sim.Ranks {
		got, err := os.ReadFile(filepath.Join(dir, trainsim.FileName(0, s, rank)))
		if err != nil || !bytes.Equal(got, trainsim.Content(r.sim.Seed, s, rank, r.sim.FileSize)) {
			r.t.Errorf("step %d rank %d: restored bytes differ from the trainer's (%v)", s, rank, err)
		}
	}
}

// logsSay fails unless one of lines contains every one of words.
func logsSay(t *testing.T, lines []string, words ...string) {
	t.Helper()
	for _, l := range lines {
		all := true
		for _, w := range words {
			all = all && strings.Contains(l, w)
		}
		if all {
			return
		}
	}
	t.Errorf("no log line says %q; lines:\n%s", words, strings.Join(lines, "\n"))
}

// neverSays fails for a log line containing what.
func neverSays(t *testing.T, lines []string, what string) {
	t.Helper()
	for _, l := range lines {
		if strings.Contains(l, what) {
			t.Errorf("logged: %s", l)
		}
	}
}

// loggedBefore fails unless a log line containing what was logged before
// at (the idle timeout fired while the link was still dead, not when
// healing it reset the connections).
func loggedBefore(t *testing.T, lines []string, what string, at time.Time) {
	t.Helper()
	for _, l := range lines {
		if !strings.Contains(l, what) {
			continue
		}
		stamp, _, _ := strings.Cut(l, "\t")
		when, err := time.Parse(time.RFC3339Nano, stamp)
		if err == nil && when.Before(at) {
			return
		}
	}
	t.Errorf("no log line says %q before %v", what, at.Format(time.RFC3339Nano))
}

// saysWhatItWillDo fails for a warn or error line that does not say what
// the agent does next.
func saysWhatItWillDo(t *testing.T, lines []string) {
	t.Helper()
	for _, l := range lines {
		if !strings.Contains(l, "retry") && !strings.Contains(l, "retrying") && !strings.Contains(l, "will") {
			t.Errorf("a logged problem does not say what the agent will do: %s", l)
		}
	}
}
