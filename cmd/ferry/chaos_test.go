package main

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/internal/s3proxy"
	"github.com/ferrylabs/ferry/internal/s3test"
	"github.com/ferrylabs/ferry/internal/trainsim"
	"github.com/ferrylabs/ferry/manifest"
	"github.com/ferrylabs/ferry/restore"
)

// chaosSeed returns the seed of a chaos run: FERRY_CHAOS_SEED, or the clock.
func chaosSeed(t *testing.T) uint64 {
	t.Helper()
	if s := os.Getenv("FERRY_CHAOS_SEED"); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("FERRY_CHAOS_SEED=%q: %v", s, err)
		}
		return seed
	}
	return uint64(time.Now().UnixNano())
}

// chaosFaultRules makes a fraction of all requests fail, split evenly
// between the given actions. A request meets the rules in order and the
// first that fires takes it, so rule k fires with probability
// q/(1-k*q), q = fraction/len(actions): each action then takes q of all
// requests.
func chaosFaultRules(fraction float64, actions ...s3proxy.Action) []s3proxy.Rule {
	q := fraction / float64(len(actions))
	rules := make([]s3proxy.Rule, len(actions))
	for k, a := range actions {
		rules[k] = s3proxy.Rule{Probability: q / (1 - float64(k)*q), Action: a}
	}
	return rules
}

// faultTally counts the faults a proxy injected, by action.
type faultTally struct {
	mu sync.Mutex
	n  map[string]int
}

func (f *faultTally) logf(format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	_, action, ok := strings.Cut(line, ": injecting ")
	if !ok {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n == nil {
		f.n = map[string]int{}
	}
	f.n[action]++
}

func (f *faultTally) String() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var parts []string
	total := 0
	for a, n := range f.n {
		parts = append(parts, fmt.Sprintf("%s: %d", a, n))
		total += n
	}
	sort.Strings(parts)
	return fmt.Sprintf("%d (%s)", total, strings.Join(parts, ", "))
}

// supervisedAgent is one `ferry agent` process whose exit is watched.
type supervisedAgent struct {
	cmd  *exec.Cmd
	logs *syncBuffer
	done chan struct{}
	err  error
}

func startSupervisedAgent(t *testing.T, env []string, args ...string) *supervisedAgent {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"agent"}, args...)...)
	cmd.Env = append([]string{"FERRY_CLI_MAIN=1", "PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), testPriority}, env...)
	a := &supervisedAgent{cmd: cmd, logs: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = a.logs, a.logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		a.err = cmd.Wait()
		close(a.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-a.done
	})
	return a
}

func (a *supervisedAgent) exited() bool {
	select {
	case <-a.done:
		return true
	default:
		return false
	}
}

func (a *supervisedAgent) kill() {
	_ = a.cmd.Process.Signal(syscall.SIGKILL)
	<-a.done
}

// chaosEvent is one thing the chaos schedule does at a moment of the run.
type chaosEvent struct {
	at   time.Duration
	what string // "kill agent", "stop server", "kill server"
}

// TestChaos runs a simulated trainer writing steps while the agent uploads
// them through a proxy failing 5% of all requests, the agent is SIGKILLed
// three times and restarted, and the S3 server goes down once. Every step
// must end up committed and restore byte for byte, no manifest may name a
// missing object, and no training file may change. The schedule comes from
// a seed, printed first: FERRY_CHAOS_SEED=N replays it (the interleaving
// of concurrent requests, and so which requests fail, still varies).
func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos run: about a minute against a real S3 server")
	}
	seed := chaosSeed(t)
	t.Logf("chaos seed %d (replay: FERRY_CHAOS_SEED=%d go test -run 'TestChaos$' ./cmd/ferry)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0x6368616f73))

	srv := s3test.Start(t)
	bucket := srv.NewBucket(t)
	st := srv.Store(t, bucket) // direct: what is really on the server
	var tally faultTally
	view, px := srv.WithProxy(t, s3proxy.Config{
		Seed: int64(rng.Uint64() >> 1),
		Logf: tally.logf,
		Rules: chaosFaultRules(0.05,
			s3proxy.SlowDown(), s3proxy.InternalError(),
			s3proxy.ResetMidRequest(-1), s3proxy.ResetBeforeResponse()),
	})

	// The trainer: steps 100, 200, ... of 4 ranks, each file between 1 and
	// 11 MiB (single PUTs and 5 MiB multipart uploads), written in 1 MiB
	// chunks with pauses, a random pause between steps.
	const nSteps, ranks = 12, 4
	watch, state := t.TempDir(), t.TempDir()
	sizes := map[int64]int64{}
	var steps []int64
	var pauses []time.Duration
	for i := range nSteps {
		s := int64(100 * (i + 1))
		steps = append(steps, s)
		sizes[s] = []int64{1 << 20, 3<<20 + 1, 6 << 20, 11<<20 + 12345}[rng.IntN(4)]
		pauses = append(pauses, time.Duration(1000+rng.IntN(1500))*time.Millisecond)
	}
	var trainDur time.Duration
	for _, p := range pauses {
		trainDur += p
	}
	// Three agent kills and one server outage, at random moments of the
	// training run.
	var events []chaosEvent
	for range 3 {
		events = append(events, chaosEvent{at: time.Duration(rng.Int64N(int64(trainDur))), what: "kill agent"})
	}
	outage := "stop server"
	if rng.IntN(2) == 0 {
		outage = "kill server"
	}
	down := time.Second + time.Duration(rng.Int64N(int64(trainDur-time.Second)))
	up := down + time.Duration(1500+rng.IntN(1500))*time.Millisecond
	events = append(events, chaosEvent{at: down, what: outage}, chaosEvent{at: up, what: "restart server"})
	sort.SliceStable(events, func(i, j int) bool { return events[i].at < events[j].at })
	for _, ev := range events {
		t.Logf("schedule: %s at %v", ev.what, ev.at.Round(time.Millisecond))
	}
	t.Logf("schedule: trainer writes %d steps of %d ranks over about %v, file sizes %v", nSteps, ranks, trainDur.Round(time.Second), sizes)

	env := view.Env()
	args := []string{"--watch", watch, "--to", "s3://" + bucket + "/run", "--state-dir", state,
		"--layout", "composer", "--settle", "300ms", "--expected-ranks", strconv.Itoa(ranks), "--part-size", "5MiB",
		"--concurrency", "4", "--metrics-addr", "off"}
	var agents []*supervisedAgent
	current := startSupervisedAgent(t, env, args...)
	agents = append(agents, current)
	t.Cleanup(func() {
		if t.Failed() {
			for i, a := range agents {
				t.Logf("agent run %d output:\n%s", i+1, a.logs.String())
			}
		}
	})

	// stamps records each training file's size and mtime once written.
	type stamp struct {
		size  int64
		mtime time.Time
	}
	var stampMu sync.Mutex
	stamps := map[string]stamp{}
	trainErr := make(chan error, 1)
	start := time.Now()
	go func() {
		for i, s := range steps {
			sim := trainsim.Options{Dir: watch, Ranks: ranks, FileSize: sizes[s], Chunk: 1 << 20, Pause: 40 * time.Millisecond, Seed: int64(seed >> 1)}
			if err := trainsim.WriteStep(context.Background(), sim, s); err != nil {
				trainErr <- err
				return
			}
			stampMu.Lock()
			for r := range ranks {
				name := trainsim.FileName(0, s, r)
				fi, err := os.Stat(filepath.Join(watch, name))
				if err != nil {
					stampMu.Unlock()
					trainErr <- err
					return
				}
				stamps[name] = stamp{fi.Size(), fi.ModTime()}
			}
			stampMu.Unlock()
			time.Sleep(pauses[i])
		}
		trainErr <- nil
	}()

	// The schedule runs here. An agent that exits on its own (it gives
	// up at start when the server is down) is started again, as systemd's
	// Restart=on-failure would.
	var selfExits int
	restartIfExited := func() {
		if current.exited() {
			selfExits++
			t.Logf("agent run %d exited by itself at %v (%v); restarting", len(agents), time.Since(start).Round(time.Millisecond), current.err)
			current = startSupervisedAgent(t, env, args...)
			agents = append(agents, current)
		}
	}
	sleepUntil := func(at time.Duration) {
		for time.Since(start) < at {
			restartIfExited()
			time.Sleep(min(100*time.Millisecond, at-time.Since(start)))
		}
	}
	for _, ev := range events {
		sleepUntil(ev.at)
		switch ev.what {
		case "kill agent":
			restartIfExited()
			current.kill()
			t.Logf("%v: SIGKILLed agent run %d", time.Since(start).Round(time.Millisecond), len(agents))
			time.Sleep(time.Duration(rng.IntN(1000)) * time.Millisecond)
			current = startSupervisedAgent(t, env, args...)
			agents = append(agents, current)
		case "kill server":
			srv.Kill()
			t.Logf("%v: SIGKILLed the S3 server", time.Since(start).Round(time.Millisecond))
		case "stop server":
			srv.Stop()
			t.Logf("%v: stopped the S3 server", time.Since(start).Round(time.Millisecond))
		case "restart server":
			srv.Restart(t)
			t.Logf("%v: S3 server restarted", time.Since(start).Round(time.Millisecond))
		}
	}
	for waiting := true; waiting; {
		select {
		case err := <-trainErr:
			if err != nil {
				t.Fatalf("trainer: %v", err)
			}
			waiting = false
		case <-time.After(100 * time.Millisecond):
			restartIfExited()
		}
	}
	t.Logf("%v: trainer done", time.Since(start).Round(time.Millisecond))

	// The end: a live agent, flush, SIGTERM.
	restartIfExited()
	waitFor(t, "the agent's control socket", time.Minute, func() bool {
		return ferry(t, nil, "status", "--state-dir", state).code == 0
	})
	r := ferry(t, nil, "flush", "--state-dir", state, "--timeout", "2m")
	if r.code != 0 {
		t.Fatalf("flush: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	t.Logf("%v: flush: %s", time.Since(start).Round(time.Millisecond), strings.TrimSpace(r.stdout))
	_ = current.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-current.done:
	case <-time.After(time.Minute):
		t.Fatal("agent still running a minute after SIGTERM")
	}
	if current.err != nil {
		t.Errorf("last agent run after SIGTERM: %v, want exit 0", current.err)
	}

	// Every step committed, and nothing else.
	got := committed(t, st, "run")
	slices.Sort(got)
	if !slices.Equal(got, steps) {
		t.Fatalf("committed steps %v, want %v", got, steps)
	}
	if err := checkCommittedComplete(st, "run"); err != nil {
		t.Fatal(err)
	}
	// Every committed step restores and verifies, byte for byte.
	for _, s := range steps {
		dst := t.TempDir()
		if _, err := restore.Restore(context.Background(), restore.Options{Store: st, Prefix: "run", Dir: dst, Step: s}); err != nil {
			t.Fatalf("restore step %d: %v", s, err)
		}
		for r := range ranks {
			got, _ := os.ReadFile(filepath.Join(dst, trainsim.FileName(0, s, r)))
			if !bytes.Equal(got, trainsim.Content(int64(seed>>1), s, r, sizes[s])) {
				t.Errorf("step %d rank %d: restored bytes differ", s, r)
			}
		}
	}
	// The latest step once more with the CLI, through the faulty proxy.
	last := steps[len(steps)-1]
	dst := filepath.Join(t.TempDir(), "latest")
	ferry(t, view, "restore", "--from", "s3://"+bucket+"/run", "--to", dst).must(t, 0)
	for r := range ranks {
		got, _ := os.ReadFile(filepath.Join(dst, trainsim.FileName(0, last, r)))
		if !bytes.Equal(got, trainsim.Content(int64(seed>>1), last, r, sizes[last])) {
			t.Errorf("CLI restore through the proxy: rank %d of step %d differs", r, last)
		}
	}

	// No training file changed, and the agent added nothing to the watch
	// directory.
	var want []string
	for _, s := range steps {
		for r := range ranks {
			name := trainsim.FileName(0, s, r)
			want = append(want, name)
			fi, err := os.Stat(filepath.Join(watch, name))
			if err != nil || fi.Size() != stamps[name].size || !fi.ModTime().Equal(stamps[name].mtime) {
				t.Errorf("training file %s changed: %v", name, err)
				continue
			}
			data, _ := os.ReadFile(filepath.Join(watch, name))
			if !bytes.Equal(data, trainsim.Content(int64(seed>>1), s, r, sizes[s])) {
				t.Errorf("training file %s: content changed", name)
			}
		}
	}
	for r := range ranks {
		want = append(want, trainsim.LatestName(r))
	}
	entries, _ := os.ReadDir(watch)
	var have []string
	for _, e := range entries {
		have = append(have, e.Name())
	}
	slices.Sort(want)
	if !slices.Equal(have, want) {
		t.Errorf("watch directory holds %v, want %v", have, want)
	}

	counts := px.Counts()
	total := 0
	for _, n := range counts {
		total += n
	}
	t.Logf("seed %d: %d steps committed after %d agent runs (%d exited by themselves); %d requests, faults injected %s; UploadPart %d, PutObject %d, GetObject %d",
		seed, len(got), len(agents), selfExits, total, tally.String(), counts[s3proxy.OpUploadPart], counts[s3proxy.OpPutObject], counts[s3proxy.OpGetObject])
}

// TestCLIRestoreUnderFaults corrupts the bytes of one object on their way
// from the server: once, restore downloads the file again and succeeds;
// every time, it fails naming the file, and the final path keeps what it
// held. (internal/s3proxy's tests do the same through the restore package;
// this is the ferry binary.)
func TestCLIRestoreUnderFaults(t *testing.T) {
	srv := s3test.Shared(t)
	bucket := srv.NewBucket(t)
	url := "s3://" + bucket + "/run"
	src := t.TempDir()
	model, optim := randomBytes(7*mib+3, 31), randomBytes(mib, 32)
	writeFile(t, filepath.Join(src, "model.pt"), model)
	writeFile(t, filepath.Join(src, "optim.pt"), optim)
	ferry(t, srv, "push", "--to", url, "--step", "4", "--part-size", "5MiB", src).must(t, 0)
	m, err := manifest.DecodeBytes([]byte(ferry(t, srv, "show", "--from", url).must(t, 0).stdout), "run")
	if err != nil {
		t.Fatal(err)
	}
	var key string
	for _, f := range m.Files {
		if f.Path == "model.pt" {
			key = f.Key
		}
	}
	get := []string{s3proxy.OpGetObject}
	old := []byte("the previous model.pt")
	for _, c := range []struct {
		name   string
		rule   s3proxy.Rule
		wantOK bool
		expect []string
		args   []string
	}{
		{"a flipped byte once", s3proxy.Rule{Ops: get, KeyPrefix: key, Times: 1, Action: s3proxy.FlipByte(100)}, true, nil, nil},
		{"a truncated body once", s3proxy.Rule{Ops: get, KeyPrefix: key, Times: 1, Action: s3proxy.TruncateBody(1000)}, true, nil, nil},
		{"a flipped byte every time", s3proxy.Rule{Ops: get, KeyPrefix: key, Action: s3proxy.FlipByte(100)}, false,
			[]string{"restore model.pt", "BLAKE3 mismatch"}, nil},
		// Not TruncateBody(1000): restore follows a body that keeps
		// delivering, so 1,000 bytes a GET would succeed after 7,000 GETs.
		{"an empty body every time", s3proxy.Rule{Ops: get, KeyPrefix: key, Action: s3proxy.TruncateBody(0)}, false,
			[]string{"download model.pt", "object ended at byte"}, nil},
		// A body that keeps delivering, far too slowly: each GET is cut
		// after one low-speed window, and the range is tried a bounded
		// number of times (without the guard: an hour for 7 MiB).
		{"a trickling body every time", s3proxy.Rule{Ops: get, KeyPrefix: key, Action: s3proxy.Trickle(2 << 10)}, false,
			[]string{"download model.pt", "body too slow", "less than 64.0 KiB/s for 1s"}, []string{"--low-speed-limit", "64KiB/s", "--low-speed-time", "1s"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			view, px := srv.WithProxy(t, s3proxy.Config{Rules: []s3proxy.Rule{c.rule}, Logf: func(string, ...any) {}})
			dst := t.TempDir()
			writeFile(t, filepath.Join(dst, "model.pt"), old)
			r := ferry(t, view, append([]string{"restore", "--from", url, "--to", dst}, c.args...)...)
			// A restore that fails on the bytes records step 4 damaged;
			// the next case must read it again.
			defer ferry(t, srv, "verify", "--from", url, "--clear-damaged", "4").must(t, 0)
			faulted := 0
			for _, q := range px.Requests() {
				if q.Fault != "" {
					faulted++
				}
			}
			if faulted == 0 {
				t.Fatal("no fault was injected")
			}
			if c.wantOK {
				r.must(t, 0)
				if got, _ := os.ReadFile(filepath.Join(dst, "model.pt")); !bytes.Equal(got, model) {
					t.Error("model.pt differs after the restore")
				}
				if got, _ := os.ReadFile(filepath.Join(dst, "optim.pt")); !bytes.Equal(got, optim) {
					t.Error("optim.pt differs after the restore")
				}
				return
			}
			r.must(t, 1)
			line := ferryErrorLine(t, r.stderr)
			t.Logf("%d faults: %s", faulted, line)
			if !containsAll(line, c.expect...) {
				t.Errorf("error line %q does not hold %q", line, c.expect)
			}
			if got, _ := os.ReadFile(filepath.Join(dst, "model.pt")); !bytes.Equal(got, old) {
				t.Error("corrupt bytes were placed at model.pt")
			}
			for _, p := range listTree(t, dst) {
				if p != "model.pt" && p != "optim.pt" {
					t.Errorf("%s left in the target", p)
				}
			}
		})
	}
}
