package bench

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"time"
)

// The interference phase measures what the agent costs a training job on
// the same node: a trainer simulator burns CPU on every core but the last
// and writes its next checkpoint while the agent uploads the previous one
// from the same cores; the S3 server is pinned to the last core, so its CPU
// is not the trainer's loss.
const (
	interfWindow    = 20 * time.Second // how long the trainer runs
	interfStep      = 2000             // the step the agent uploads
	interfRanks     = 4
	interfRankSize  = 256 << 20
	interfNextBytes = 1 << 30 // the trainer's next checkpoint
)

// interfCase is one arrangement of trainer and agent.
type interfCase struct {
	Name string `json:"name"`
	// ComputeRate and WriteMiBps are the trainer's (zero without one);
	// *VsBaseline divide them by the no-agent case's.
	ComputeRate       float64 `json:"compute_per_s,omitempty"`
	WriteMiBps        float64 `json:"write_mibps,omitempty"`
	ComputeVsBaseline float64 `json:"compute_vs_baseline,omitempty"`
	WriteVsBaseline   float64 `json:"write_vs_baseline,omitempty"`
	// UploadMiBps is the step's bytes over TimeToDurableS, from the agent's
	// start to the step's manifest (zero without an agent).
	UploadMiBps    float64 `json:"upload_mibps,omitempty"`
	TimeToDurableS float64 `json:"time_to_durable_s,omitempty"`
	// The agent's own use of the node while the trainer ran: CPU seconds
	// (all its threads) and bytes it made the disk read or write
	// (/proc/PID/stat and io); zero without both.
	AgentCPUS      float64 `json:"agent_cpu_s_in_window,omitempty"`
	AgentDiskRead  float64 `json:"agent_disk_read_mib_in_window,omitempty"`
	AgentDiskWrite float64 `json:"agent_disk_write_mib_in_window,omitempty"`
	// StealPct is the share of the trainer's cores' time the hypervisor
	// gave to others while the trainer ran (/proc/stat steal): the host's
	// noise, which no case controls.
	StealPct float64 `json:"steal_pct,omitempty"`
	// Lowest and highest over the rounds of this case's rates over the
	// same round's baseline: how far one round can stray.
	ComputeVsBaselineRange [2]float64 `json:"compute_vs_baseline_range,omitzero"`
	WriteVsBaselineRange   [2]float64 `json:"write_vs_baseline_range,omitzero"`
}

// interfCases are the arrangements measured: the baseline first, the four
// cases with a trainer before those without (interfOrder numbers them).
var interfCases = [...]struct {
	name      string
	trainer   bool
	agentPrio string
}{
	{"trainer alone (baseline)", true, ""},
	{noiseControl, true, ""},
	{"trainer + agent at defaults", true, "low"},
	{"trainer + agent, --priority normal", true, "normal"},
	{"agent alone (trainer idle)", false, "low"},
	{"agent alone, --priority normal", false, "normal"},
}

// noiseControl is the trainer alone measured a second time each round, as
// if it were a case with an agent: its ratios to the baseline are what the
// machine's noise alone produces, the yardstick for the others'.
const noiseControl = "trainer alone again (noise control)"

// medianCase is the median of each measure over runs of one case.
func medianCase(runs []interfCase) interfCase {
	pick := func(f func(interfCase) float64) float64 {
		var v []float64
		for _, r := range runs {
			v = append(v, f(r))
		}
		return median(v)
	}
	return interfCase{Name: runs[0].Name,
		ComputeRate:    pick(func(c interfCase) float64 { return c.ComputeRate }),
		WriteMiBps:     pick(func(c interfCase) float64 { return c.WriteMiBps }),
		UploadMiBps:    pick(func(c interfCase) float64 { return c.UploadMiBps }),
		TimeToDurableS: pick(func(c interfCase) float64 { return c.TimeToDurableS }),
		AgentCPUS:      pick(func(c interfCase) float64 { return c.AgentCPUS }),
		StealPct:       pick(func(c interfCase) float64 { return c.StealPct }),
		AgentDiskRead:  pick(func(c interfCase) float64 { return c.AgentDiskRead }),
		AgentDiskWrite: pick(func(c interfCase) float64 { return c.AgentDiskWrite }),
	}
}

// pairedRange is the lowest and highest over rounds of f(runs[r]) over
// f(base[r]), the same round's baseline.
func pairedRange(runs, base []interfCase, f func(interfCase) float64) [2]float64 {
	out := [2]float64{}
	for r := range min(len(runs), len(base)) {
		if f(base[r]) <= 0 {
			continue
		}
		v := f(runs[r]) / f(base[r])
		if out[0] == 0 || v < out[0] {
			out[0] = v
		}
		out[1] = max(out[1], v)
	}
	return out
}

// interferencePhase runs the cases: trainer alone (the baseline), trainer
// with the agent at its defaults, with --priority normal, and the agent
// alone at both priorities (low priority must not slow an idle node).
func (b *bench) interferencePhase(ctx context.Context) error {
	n := runtime.NumCPU()
	if n < 2 {
		b.rep.note("interference: needs 2 cores, this machine has %d", n)
		return nil
	}
	trainerCPUs := fmt.Sprintf("0-%d", n-2)
	// A server of its own, storing in memory (/dev/shm) and pinned to the
	// last core: a remote store's CPU and disk writes are not the node's,
	// and the trainer's checkpoint write must compete only with the agent.
	shm, err := os.MkdirTemp("/dev/shm", "ferry-bench-interference-")
	if err != nil {
		b.rep.note("interference: not measured: no tmpfs for the server (%v)", err)
		return nil
	}
	defer os.RemoveAll(shm)
	srv, err := b.interferenceServer(filepath.Join(shm, "s3"), n-1)
	if err != nil {
		b.rep.note("interference: not measured: %v", err)
		return nil
	}
	defer srv.stop()
	saved := b.srv
	b.srv = srv
	defer func() { b.srv = saved }()
	restoreKernel, moved := keepKernelOff(n - 1)
	defer restoreKernel()
	b.rep.InterferenceNet += fmt.Sprintf("; %d device interrupts and the kernel's unbound work (writeback) moved to the other cores", moved)
	// The server's core never idles, in every case: a SCHED_IDLE spinner
	// takes what the server leaves. In this VM an idle vCPU halts, and
	// waking it slowed the trainer alone (whose I/O completions land
	// there) below the trainer with an agent busy beside it.
	if stop, err := spinIdle(n - 1); err == nil {
		defer stop()
		b.rep.InterferenceNet += "; a SCHED_IDLE spinner keeps that core from idling in every case"
	} else {
		log.Printf("interference: no idle spinner on the server's core: %v", err)
	}
	runs, err := b.interfRounds(ctx, trainerCPUs)
	if err != nil {
		return err
	}
	base := medianCase(runs[0])
	for i, c := range interfCases {
		res := medianCase(runs[i])
		if c.trainer && i > 0 && base.ComputeRate > 0 {
			res.ComputeVsBaseline, res.WriteVsBaseline = res.ComputeRate/base.ComputeRate, res.WriteMiBps/base.WriteMiBps
			res.ComputeVsBaselineRange = pairedRange(runs[i], runs[0], func(c interfCase) float64 { return c.ComputeRate })
			res.WriteVsBaselineRange = pairedRange(runs[i], runs[0], func(c interfCase) float64 { return c.WriteMiBps })
		}
		b.rep.Interference = append(b.rep.Interference, res)
	}
	return nil
}

// interfOrder is a Williams square over the four trainer cases (the first
// four of interfCases): over four rounds each runs once in every position
// and follows each of the others exactly once. What ran just before moves
// the trainer's rates by more than the targets' margins on this VM (a
// trainer case after one without a trainer wrote up to 1.7x faster), and a
// rotation of one fixed order put the baseline after the same case every
// round, never after a trainer case.
var interfOrder = [4][4]int{{0, 1, 3, 2}, {1, 2, 0, 3}, {2, 3, 1, 0}, {3, 0, 2, 1}}

// interfRounds runs the cases and returns each one's runs: an uncounted
// trainer case first, so the first counted one also follows a trainer,
// then rounds of the trainer cases in interfOrder, then the agent-only
// cases, alternating.
func (b *bench) interfRounds(ctx context.Context, trainerCPUs string) ([len(interfCases)][]interfCase, error) {
	var runs [len(interfCases)][]interfCase
	run := func(round, i int) error {
		c := interfCases[i]
		res, err := b.interfRun(ctx, c.name, trainerCPUs, c.trainer, c.agentPrio, i)
		if err != nil {
			return fmt.Errorf("interference %s: %w", c.name, err)
		}
		log.Printf("interference: round %d %-36s compute %s/s  write %s MiB/s  steal %.1f%%  upload %s MiB/s  time-to-durable %s s  agent in window %.2f s CPU, %.0f/%.0f MiB disk read/write",
			round, c.name, numOrDash(res.ComputeRate), numOrDash(res.WriteMiBps), res.StealPct, numOrDash(res.UploadMiBps), numOrDash(res.TimeToDurableS),
			res.AgentCPUS, res.AgentDiskRead, res.AgentDiskWrite)
		if round > 0 {
			runs[i] = append(runs[i], res)
		}
		return nil
	}
	if err := run(0, 0); err != nil { // warm-up, not counted
		return runs, err
	}
	// Whole squares: -rounds 3 (the default) runs 4, -rounds 5 runs 8; a
	// smoke run (-quick, one round) stays one row.
	rounds := max(b.cfg.rounds, 1)
	if rounds > 1 {
		rounds = (rounds + len(interfOrder) - 1) / len(interfOrder) * len(interfOrder)
	}
	for r := range rounds {
		for _, i := range interfOrder[r%len(interfOrder)] {
			if err := run(r+1, i); err != nil {
				return runs, err
			}
		}
	}
	for r := range rounds {
		for k := len(interfOrder); k < len(interfCases); k++ {
			i := k
			if r%2 == 1 { // alternate which agent-only case goes first
				i = len(interfCases) - 1 - (k - len(interfOrder))
			}
			if err := run(r+1, i); err != nil {
				return runs, err
			}
		}
	}
	return runs, nil
}

// interferenceServer starts the phase's server on core cpu: in a network
// namespace of its own over a veth whose receive processing runs on that
// core, where this machine allows it (root, iproute2, plain HTTP: the test
// certificate names 127.0.0.1 only); otherwise on loopback, pinned, where
// the kernel processes what the agent sends on the agent's core.
func (b *bench) interferenceServer(dir string, cpu int) (*server, error) {
	b.rep.InterferenceNet = "loopback: the server pinned to the last core, its receive processing on the sender's core"
	if !b.cfg.tls {
		ns, err := newNetns(cpu)
		if err == nil {
			srv, err := startServerAt(b.cfg.versitygw, dir, false, ns.nsIP+":9000", ns.wrap())
			if err == nil {
				b.rep.InterferenceNet = "a network namespace of its own over a veth (MTU 9000), the server and its receive processing (RPS) on the last core"
				srv.cleanup = ns.close
				return srv, nil
			}
			ns.close()
		}
		log.Printf("interference: no network namespace (%v); the server runs on loopback", err)
	}
	srv, err := startServer(b.cfg.versitygw, dir, b.cfg.tls, "")
	if err != nil {
		return nil, err
	}
	if err := pin(srv.pid(), fmt.Sprint(cpu)); err != nil {
		srv.stop()
		return nil, fmt.Errorf("cannot pin the server: %w", err)
	}
	return srv, nil
}

// spinIdle runs a busy loop at SCHED_IDLE on cpu until stop is called.
func spinIdle(cpu int) (stop func(), err error) {
	cmd := exec.Command("chrt", "-i", "0", "taskset", "-c", fmt.Sprint(cpu), "sh", "-c", "while :; do :; done")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }, nil
}

// pin restricts every thread of process pid to cpus (taskset -a).
func pin(pid int, cpus string) error {
	if out, err := exec.Command("taskset", "-a", "-p", "-c", cpus, fmt.Sprint(pid)).CombinedOutput(); err != nil {
		return fmt.Errorf("taskset: %v: %s", err, out)
	}
	return nil
}
