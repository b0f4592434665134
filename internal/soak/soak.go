// Package soak drives a real `ferry agent` process through thousands of
// checkpoint steps and measures, every few hundred steps, what would show
// a leak in an agent that runs for weeks: its resident memory, open
// descriptors, goroutines, inotify watches, and the size of its journal
// and upload state (make soak; cmd/ferry-soak).
//
// The trainer it plays saves a torch.distributed.checkpoint step every
// Interval (two small .distcp files, .metadata renamed last), a large one
// every LargeEvery steps, deletes some steps itself right after saving
// them, and runs `ferry prune --keep-last` now and then; the agent runs at
// its defaults plus --keep-local, so it deletes old committed steps.
package soak

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// Config is one soak run.
type Config struct {
	// Ferry is the ferry binary; Env the environment it needs to reach
	// the store (credentials, region, S3_ENDPOINT_URL).
	Ferry string
	Env   []string
	// To is the destination, s3://bucket/prefix.
	To string
	// Dir holds the watch dir, the state dir and the agent's log.
	Dir string

	Steps    int           // steps to save
	Every    int           // steps between samples
	Interval time.Duration // between two saves
	// SmallSize and LargeSize are the bytes of each rank file of a step;
	// every LargeEvery-th step is large.
	SmallSize, LargeSize, LargeEvery int
	// Every DeleteEvery-th step (5, 15, ... for 10) is deleted by the
	// trainer one Interval after it is saved (0: never).
	DeleteEvery int
	// Every PruneEvery steps, `ferry prune --keep-last PruneKeep` runs
	// (0: never).
	PruneEvery, PruneKeep int
	// KeepLocal is the agent's --keep-local.
	KeepLocal int
	// Drain bounds the wait, after the last save, for the agent to commit
	// the newest step.
	Drain time.Duration
	// Progress receives a line per sample (nil: none).
	Progress io.Writer
}

// Defaults returns the full soak: 5,000 steps, sampled every 500.
func Defaults() Config {
	return Config{
		Steps: 5000, Every: 500, Interval: 100 * time.Millisecond,
		SmallSize: 16 << 10, LargeSize: 4 << 20, LargeEvery: 50,
		DeleteEvery: 10, PruneEvery: 250, PruneKeep: 20, KeepLocal: 3,
		Drain: 2 * time.Minute,
	}
}

// Result is a run's samples, in order, the last one taken after the agent
// drained, and the path of the agent's log.
type Result struct {
	Samples []Sample
	Log     string
	// Prunes counts the `ferry prune` runs, all of which succeeded.
	Prunes int
}

// Run starts the agent, plays the trainer and samples the agent; it stops
// the agent (SIGTERM) before it returns.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if cfg.Steps < 1 || cfg.Every < 1 || cfg.Interval <= 0 || cfg.LargeEvery < 1 {
		return nil, errors.New("soak: Steps, Every, Interval and LargeEvery must be positive")
	}
	watch, state := filepath.Join(cfg.Dir, "watch"), filepath.Join(cfg.Dir, "state")
	for _, d := range []string{watch, state} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("soak: %w", err)
		}
	}
	tr, err := newTrainer(watch, max(cfg.SmallSize, cfg.LargeSize))
	if err != nil {
		return nil, err
	}
	ag, err := startAgent(cfg, watch, state)
	if err != nil {
		return nil, err
	}
	defer ag.stop()
	res := &Result{Log: ag.logPath}
	pr := &pruner{cfg: cfg}
	err = drive(ctx, cfg, tr, ag, pr, res)
	pr.wait()
	if err == nil {
		err = pr.err
	}
	res.Prunes = pr.runs
	if serr := ag.stop(); err == nil && serr != nil {
		err = serr
	}
	return res, err
}

// drive saves the steps on schedule, sampling every cfg.Every, then waits
// for the agent to catch up and takes the last sample.
func drive(ctx context.Context, cfg Config, tr *trainer, ag *agentProc, pr *pruner, res *Result) error {
	start := time.Now()
	take := func(label string, step int) error {
		s, err := ag.probe.sample(ctx)
		if err != nil {
			return fmt.Errorf("soak: sample at %s: %w", label, err)
		}
		s.Label, s.Step, s.Elapsed = label, step, time.Since(start)
		res.Samples = append(res.Samples, s)
		if cfg.Progress != nil {
			fmt.Fprintln(cfg.Progress, s.line())
		}
		return nil
	}
	lastKept := 0
	for step := 1; step <= cfg.Steps; step++ {
		if err := sleepUntil(ctx, start.Add(time.Duration(step)*cfg.Interval)); err != nil {
			return err
		}
		if err := ag.alive(); err != nil {
			return err
		}
		size := cfg.SmallSize
		if step%cfg.LargeEvery == 0 {
			size = cfg.LargeSize
		}
		if err := tr.write(step, size); err != nil {
			return fmt.Errorf("soak: %w", err)
		}
		// The step saved one interval ago is deleted now: the agent has
		// seen it complete, and may be uploading or have committed it.
		if prev := step - 1; cfg.deleted(prev) {
			if err := tr.remove(prev); err != nil {
				return fmt.Errorf("soak: %w", err)
			}
		}
		if !cfg.deleted(step) || step == cfg.Steps {
			lastKept = step
		}
		if cfg.PruneEvery > 0 && step%cfg.PruneEvery == 0 {
			pr.start(ctx)
		}
		if step%cfg.Every == 0 {
			if err := take(fmt.Sprint(step), step); err != nil {
				return err
			}
		}
	}
	if err := ag.waitDrained(ctx, int64(lastKept), cfg.KeepLocal, cfg.Drain); err != nil {
		return err
	}
	pr.wait()
	return take("end", cfg.Steps)
}

// deleted reports whether the trainer deletes step: every DeleteEvery-th,
// half way between two multiples, so never a large step.
func (cfg Config) deleted(step int) bool {
	return cfg.DeleteEvery > 0 && step > 0 && step%cfg.DeleteEvery == cfg.DeleteEvery/2
}

// Deleted counts the steps of a run the trainer deletes.
func (cfg Config) Deleted() int {
	n := 0
	for s := 1; s < cfg.Steps; s++ {
		if cfg.deleted(s) {
			n++
		}
	}
	return n
}

func sleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err()
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}

// pruner runs `ferry prune` in the background, one at a time, so a slow
// prune never delays the trainer's saves.
type pruner struct {
	cfg  Config
	wg   sync.WaitGroup
	mu   sync.Mutex
	busy bool
	runs int
	err  error
}

func (p *pruner) start(ctx context.Context) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.busy || p.err != nil {
		return
	}
	p.busy = true
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		// --min-age: objects of a step the agent is still uploading are
		// referenced by no manifest yet; the grace period keeps them.
		cmd := exec.CommandContext(ctx, p.cfg.Ferry, "prune", "--from", p.cfg.To,
			"--keep-last", fmt.Sprint(p.cfg.PruneKeep), "--min-age", "1m")
		cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + p.cfg.Dir}, p.cfg.Env...)
		out, err := cmd.CombinedOutput()
		p.mu.Lock()
		defer p.mu.Unlock()
		p.busy = false
		p.runs++
		if err != nil && p.err == nil {
			p.err = fmt.Errorf("soak: ferry prune: %w; output:\n%s", err, out)
		}
	}()
}

func (p *pruner) wait() { p.wg.Wait() }

// agentProc is the running `ferry agent`.
type agentProc struct {
	cmd     *exec.Cmd
	logPath string
	logFile *os.File
	probe   *probe
	done    chan struct{}
	err     error // exit status, once done is closed
	once    sync.Once
	stopErr error
}

func startAgent(cfg Config, watch, state string) (*agentProc, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	logPath := filepath.Join(cfg.Dir, "agent.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("soak: %w", err)
	}
	// --priority normal: the default (SCHED_IDLE) yields to every other
	// process, and on a shared machine that measures the neighbours, not
	// the agent.
	cmd := exec.Command(cfg.Ferry, "agent", "--watch", watch, "--to", cfg.To, "--state-dir", state,
		"--keep-local", fmt.Sprint(cfg.KeepLocal), "--metrics-addr", addr, "--priority", "normal")
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + cfg.Dir}, cfg.Env...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("soak: start %s agent: %w", cfg.Ferry, err)
	}
	a := &agentProc{cmd: cmd, logPath: logPath, logFile: logFile, done: make(chan struct{}),
		probe: &probe{pid: cmd.Process.Pid, metrics: "http://" + addr + "/metrics", stateDir: state, watch: watch,
			client: &http.Client{}}}
	go func() {
		a.err = cmd.Wait()
		close(a.done)
	}()
	if err := a.waitReady(30 * time.Second); err != nil {
		a.stop()
		return nil, err
	}
	return a, nil
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("soak: find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func (a *agentProc) alive() error {
	select {
	case <-a.done:
		return fmt.Errorf("soak: the agent exited: %v (log: %s)", a.err, a.logPath)
	default:
		return nil
	}
}

// waitReady polls the metrics endpoint until the agent serves it.
func (a *agentProc) waitReady(d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		if err := a.alive(); err != nil {
			return err
		}
		if _, err := a.probe.scrape(context.Background()); err == nil {
			return nil
		} else if time.Now().After(deadline) {
			return fmt.Errorf("soak: agent metrics not served after %v: %w (log: %s)", d, err, a.logPath)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitDrained waits until the agent committed step (or a later one) and
// --keep-local left at most keep steps on disk: the state the end sample
// compares with the first, whatever backlog the machine's load caused.
func (a *agentProc) waitDrained(ctx context.Context, step int64, keep int, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		if err := a.alive(); err != nil {
			return err
		}
		m, err := a.probe.scrape(ctx)
		if err == nil && int64(m["ferry_last_committed_step"]) >= step {
			local, err := os.ReadDir(a.probe.watch)
			if err == nil && (keep == 0 || len(local) <= keep) {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("soak: %v after the last save, step %d is not committed or more than --keep-local %d steps are on disk (log: %s)", d, step, keep, a.logPath)
		}
		if err := sleepUntil(ctx, time.Now().Add(100*time.Millisecond)); err != nil {
			return err
		}
	}
}

// stop sends SIGTERM and waits for the agent to exit (SIGKILL after a
// minute); an exit status other than 0 is an error.
func (a *agentProc) stop() error {
	a.once.Do(func() {
		_ = a.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-a.done:
		case <-time.After(time.Minute):
			_ = a.cmd.Process.Kill()
			<-a.done
		}
		a.logFile.Close()
		if a.err != nil {
			a.stopErr = fmt.Errorf("soak: agent exit after SIGTERM: %w (log: %s)", a.err, a.logPath)
		}
	})
	return a.stopErr
}
