package bench

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// TrainerSimFlag, as the first argument, makes ferry-bench the interference
// phase's trainer (TrainerSim) instead of the benchmark.
const TrainerSimFlag = "-trainer-sim"

// TrainerSim is the interference phase's trainer, run as a child of the
// bench with the arguments after TrainerSimFlag.
func TrainerSim(args []string) error {
	fs := flag.NewFlagSet("trainer-sim", flag.ExitOnError)
	dir := fs.String("trainer-dir", "", "where the next checkpoint is written")
	window := fs.Duration("trainer-window", interfWindow, "how long to train")
	_ = fs.Parse(args)
	return trainerSim(*dir, *window)
}

// trainerSim is the training job of the interference phase, run as this
// binary with -trainer-sim: one goroutine per CPU it may use does fixed
// units of integer work (the data loader and host side of a step), while a
// writer writes the next checkpoint (interfNextBytes, fsynced). It prints a
// trainerResult: work units per second over window, and the checkpoint's
// write rate.
func trainerSim(dir string, window time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), window)
	defer cancel()
	var units atomic.Int64
	var wg sync.WaitGroup
	for range runtime.NumCPU() { // the affinity mask taskset set
		wg.Go(func() { burn(ctx, &units) })
	}
	var writeS float64
	var werr error
	wg.Go(func() { writeS, werr = writeCheckpoint(filepath.Join(dir, "next.pt"), interfNextBytes) })
	start := time.Now()
	wg.Wait()
	if werr != nil {
		return fmt.Errorf("write the next checkpoint: %w", werr)
	}
	res := trainerResult{
		ComputePerS: float64(units.Load()) / time.Since(start).Seconds(),
		WriteMiBps:  float64(interfNextBytes) / (1 << 20) / writeS,
	}
	return json.NewEncoder(os.Stdout).Encode(res)
}

// burn does units of xorshift work until ctx ends.
func burn(ctx context.Context, units *atomic.Int64) {
	x := uint64(88172645463325252)
	for ctx.Err() == nil {
		for range 1 << 18 {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
		}
		units.Add(1)
	}
	if x == 0 { // keep the loop from being optimised away
		fmt.Fprintln(os.Stderr, "unreachable")
	}
}

// writeCheckpoint writes size bytes to path in 8 MiB writes, fsyncs, and
// returns the seconds it took.
func writeCheckpoint(path string, size int64) (float64, error) {
	start := time.Now()
	f, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	buf := make([]byte, 8<<20)
	for i := range buf {
		buf[i] = byte(i * 31)
	}
	for left := size; left > 0; left -= int64(len(buf)) {
		if _, err := f.Write(buf[:min(int64(len(buf)), left)]); err != nil {
			return 0, err
		}
	}
	if err := f.Sync(); err != nil {
		return 0, err
	}
	return time.Since(start).Seconds(), nil
}

// trainerResult is what the trainer simulator prints.
type trainerResult struct {
	ComputePerS float64 `json:"compute_per_s"`
	WriteMiBps  float64 `json:"write_mibps"`
}

// runTrainer runs this binary's trainer simulator (-trainer-sim) pinned to
// cpus for interfWindow.
func (b *bench) runTrainer(ctx context.Context, dir, cpus string) (trainerResult, error) {
	var res trainerResult
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return res, err
	}
	self, err := os.Executable()
	if err != nil {
		return res, err
	}
	cmd := exec.CommandContext(ctx, "taskset", "-c", cpus, self, TrainerSimFlag, "-trainer-dir", dir,
		"-trainer-window", interfWindow.String())
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.Output()
	if err != nil {
		return res, fmt.Errorf("trainer simulator: %w", err)
	}
	if err := json.Unmarshal(out, &res); err != nil {
		return res, fmt.Errorf("trainer simulator printed %q: %w", out, err)
	}
	return res, nil
}
