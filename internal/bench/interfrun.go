package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/ferrylabs/ferry/manifest"
)

// interfRun runs one case on trainerCPUs.
func (b *bench) interfRun(ctx context.Context, name, cpus string, trainer bool, prio string, id int) (interfCase, error) {
	res := interfCase{Name: name}
	root := filepath.Join(b.work, "interference")
	defer os.RemoveAll(root)
	prefix := fmt.Sprintf("interf-%d", id)
	defer b.srv.removePrefix(prefix) //nolint:errcheck // scratch
	// Every case, the baseline too, starts from the same disk state: the
	// previous step just written and synced. (Without it the baseline's
	// fsynced checkpoint write met a different writeback state and the
	// cases were not comparable.)
	watch := filepath.Join(root, "agent", "ckpt")
	// And the same history: on this VM a write to blocks a deleted file
	// just freed runs several times faster than one to blocks freed long
	// ago, so a case after a trainer case wrote faster than one after an
	// agent-only case. Every case now follows one such write.
	if err := os.MkdirAll(root, 0o755); err != nil {
		return res, err
	}
	scratch := filepath.Join(root, "precondition.bin")
	if _, err := writeCheckpoint(scratch, interfNextBytes); err != nil {
		return res, fmt.Errorf("precondition the disk: %w", err)
	}
	if err := os.Remove(scratch); err != nil {
		return res, err
	}
	train := exec.CommandContext(ctx, b.cfg.trainsim, "--dir", watch, "--ranks", fmt.Sprint(interfRanks),
		"--steps", fmt.Sprint(interfStep), "--size", fmtSize(interfRankSize), "--pause", "0s")
	if out, err := train.CombinedOutput(); err != nil {
		return res, fmt.Errorf("ferry-trainsim: %v: %s", err, out)
	}
	settle()
	var agent *exec.Cmd
	start := time.Now()
	if prio != "" {
		var err error
		if agent, err = b.startAgentWith(ctx, filepath.Join(root, "agent"), prefix, interfRanks, cpus, "--priority", prio, "--settle", "1s"); err != nil {
			return res, err
		}
		defer stopAgent(agent)
	} else {
		// The same pause after settling as a case with an agent: the
		// trainer must meet the same disk state in every case.
		time.Sleep(agentStartWait)
	}
	if trainer {
		if err := b.trainBeside(ctx, &res, filepath.Join(root, "trainer"), cpus, agent); err != nil {
			return res, err
		}
	}
	if agent != nil {
		ttd, err := b.waitManifest(ctx, prefix, interfStep, start)
		if err != nil {
			return res, err
		}
		res.TimeToDurableS = ttd.Seconds()
		res.UploadMiBps = float64(interfRanks*interfRankSize) / (1 << 20) / ttd.Seconds()
	}
	return res, nil
}

// trainBeside runs the trainer on cpus, writing in dir, and records its
// rates and the steal on its cores in res; with an agent beside it, also
// what the agent used meanwhile.
func (b *bench) trainBeside(ctx context.Context, res *interfCase, dir, cpus string, agent *exec.Cmd) error {
	var before procUse
	if agent != nil {
		before = readProcUse(agent.Process.Pid)
	}
	ncpu := trainerCPUCount(cpus)
	cpu0 := readCPUTimes(ncpu)
	t, err := b.runTrainer(ctx, dir, cpus)
	if err != nil {
		return err
	}
	res.ComputeRate, res.WriteMiBps = t.ComputePerS, t.WriteMiBps
	res.StealPct = readCPUTimes(ncpu).stealPctSince(cpu0)
	if agent != nil {
		after := readProcUse(agent.Process.Pid)
		res.AgentCPUS = after.cpuS - before.cpuS
		res.AgentDiskRead = float64(after.readBytes-before.readBytes) / (1 << 20)
		res.AgentDiskWrite = float64(after.writeBytes-before.writeBytes) / (1 << 20)
	}
	return nil
}

// waitManifest waits for the manifest of step under prefix on the server
// and returns the time since start.
func (b *bench) waitManifest(ctx context.Context, prefix string, step int64, start time.Time) (time.Duration, error) {
	path := filepath.Join(b.srv.dir, bucket, filepath.FromSlash(manifest.ManifestKey(prefix, step)))
	for deadline := time.Now().Add(10 * time.Minute); ; {
		if _, err := os.Stat(path); err == nil {
			return time.Since(start), nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return 0, fmt.Errorf("no manifest for step %d after %s", step, time.Since(start).Round(time.Second))
		}
		time.Sleep(20 * time.Millisecond)
	}
}
