package bench

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/ferrylabs/ferry/manifest"
)

// agentResult is what the agent phase measured.
type agentResult struct {
	// IdleCPUPercent is the agent's CPU over IdleS seconds of watching an
	// empty directory, in percent of one core.
	IdleCPUPercent float64 `json:"idle_cpu_percent_of_one_core"`
	IdleS          float64 `json:"idle_s"`
	// TimeToDurableS runs from the moment the trainer's last write of a
	// step returned to the moment its manifest is on the server, at the
	// agent's defaults (close-write detection; SettleS for what it cannot
	// vouch for).
	TimeToDurableS float64 `json:"time_to_durable_s"`
	SettleS        float64 `json:"settle_s"`
	StepBytes      int64   `json:"step_bytes"`
}

// agentStep is the step ferry-trainsim writes for the time-to-durable
// measurement: 2 ranks of agentRankSize, Composer names.
const (
	agentStep     = 1000
	agentRanks    = 2
	agentRankSize = 256 << 20
	agentSettle   = 5 * time.Second // detect.DefaultSettle, passed explicitly
)

// agentPhase measures the agent when the ferry binary has one; until it
// does, the report says so rather than showing a number.
func (b *bench) agentPhase(ctx context.Context) {
	out, err := exec.CommandContext(ctx, b.cfg.ferry, "agent", "--help").CombinedOutput()
	if err != nil {
		b.rep.Agent = "agent: not measured, command missing (`ferry agent --help`: " + firstOf(string(out), err) + ")"
		log.Print(b.rep.Agent)
		return
	}
	if _, err := exec.LookPath(b.cfg.trainsim); err != nil {
		b.rep.Agent = "agent: not measured, ferry-trainsim not found at " + b.cfg.trainsim
		log.Print(b.rep.Agent)
		return
	}
	res, err := b.measureAgent(ctx)
	if err != nil {
		b.rep.Agent = "agent: not measured, " + err.Error()
		log.Print(b.rep.Agent)
		return
	}
	b.rep.AgentResult = &res
	b.rep.Agent = fmt.Sprintf("idle CPU %.2f%% of one core (%.0f clock ticks of 10 ms) over %.0f s of watching an empty directory; "+
		"time-to-durable %.1f s for a %d x %s step written at full speed (from the trainer's last write to the manifest on the server; "+
		"defaults: close-write detection, the %.0f s settle window only for what it cannot vouch for)", res.IdleCPUPercent, res.IdleCPUPercent*res.IdleS, res.IdleS, res.TimeToDurableS, agentRanks, fmtSize(agentRankSize), res.SettleS)
	log.Print("agent: " + b.rep.Agent)
}

func (b *bench) measureAgent(ctx context.Context) (agentResult, error) {
	res := agentResult{SettleS: agentSettle.Seconds(), StepBytes: agentRanks * agentRankSize}
	root := filepath.Join(b.work, "agent")
	defer os.RemoveAll(root)

	// Idle: an empty directory, nothing to do but watch.
	idle, err := b.startAgent(ctx, filepath.Join(root, "idle"), "agent-idle")
	if err != nil {
		return res, err
	}
	time.Sleep(3 * time.Second) // start-up is not idling
	c0, t0 := procCPU(idle.Process.Pid), time.Now()
	select {
	case <-time.After(b.cfg.idle):
	case <-ctx.Done():
	}
	c1, t1 := procCPU(idle.Process.Pid), time.Now()
	stopAgent(idle)
	res.IdleS = t1.Sub(t0).Seconds()
	res.IdleCPUPercent = (c1 - c0) / res.IdleS * 100

	// Time-to-durable: the trainer writes one step; wait for its manifest.
	watch := filepath.Join(root, "ttd")
	ag, err := b.startAgent(ctx, watch, "agent-ttd")
	if err != nil {
		return res, err
	}
	defer stopAgent(ag)
	time.Sleep(2 * time.Second)
	train := exec.CommandContext(ctx, b.cfg.trainsim, "--dir", filepath.Join(watch, "ckpt"), "--ranks", fmt.Sprint(agentRanks),
		"--steps", fmt.Sprint(agentStep), "--size", fmtSize(agentRankSize), "--pause", "0s")
	if out, err := train.CombinedOutput(); err != nil {
		return res, fmt.Errorf("ferry-trainsim: %v: %s", err, out)
	}
	written := time.Now()
	manifestPath := filepath.Join(b.srv.dir, bucket, filepath.FromSlash(manifest.ManifestKey("agent-ttd", agentStep)))
	deadline := written.Add(5 * time.Minute)
	for {
		if _, err := os.Stat(manifestPath); err == nil {
			res.TimeToDurableS = time.Since(written).Seconds()
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return res, fmt.Errorf("no manifest for step %d after %s", agentStep, time.Since(written).Round(time.Second))
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = b.srv.removePrefix("agent-ttd")
	_ = b.srv.removePrefix("agent-idle")
	return res, nil
}

// startAgent starts `ferry agent` watching dir/ckpt and uploading to prefix.
func (b *bench) startAgent(ctx context.Context, dir, prefix string) (*exec.Cmd, error) {
	return b.startAgentWith(ctx, dir, prefix, agentRanks, "", "--settle", agentSettle.String())
}

// startAgentWith starts the agent for steps of ranks files, pinned to cpus
// (taskset; "" for none), with extra flags.
func (b *bench) startAgentWith(ctx context.Context, dir, prefix string, ranks int, cpus string, extra ...string) (*exec.Cmd, error) {
	watch := filepath.Join(dir, "ckpt")
	state := filepath.Join(dir, "state")
	for _, d := range []string{watch, state} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	env := append(append([]string(nil), b.ts.env...), "S3_ENDPOINT_URL="+b.srv.endpoint)
	if b.srv.caFile != "" {
		env = append(env, "AWS_CA_BUNDLE="+b.srv.caFile) // the last one wins
	}
	argv := append([]string{b.cfg.ferry, "agent", "--quiet", "--watch", watch,
		"--to", "s3://" + bucket + "/" + prefix, "--state-dir", state, "--metrics-addr", "off",
		"--expected-ranks", fmt.Sprint(ranks)}, extra...)
	if cpus != "" {
		argv = append([]string{"taskset", "-c", cpus}, argv...)
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = env
	var out tailBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	time.Sleep(agentStartWait)
	if cmd.ProcessState != nil || syscall.Kill(cmd.Process.Pid, 0) != nil {
		_ = cmd.Wait()
		return nil, fmt.Errorf("ferry agent exited at start: %s", out.String())
	}
	return cmd, nil
}

// agentStartWait is how long startAgentWith gives an agent to start (and
// fail) before it returns.
const agentStartWait = 500 * time.Millisecond

// stopAgent stops an agent with SIGTERM (it drains), then SIGKILL.
func stopAgent(cmd *exec.Cmd) {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}
