package follow

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"go.uber.org/zap"
)

// execWait is how long a command has to exit after follow is stopped
// and sends it SIGTERM, before it is killed.
const execWait = 30 * time.Second

// runExec runs Options.Exec for a placed step with sh -c, its output
// passed through, and the step in its environment: FERRY_STEP,
// FERRY_STEP_DIR (absolute), FERRY_REVISION and FERRY_FROM. Follow waits
// for it: steps committed meanwhile are placed after it, in order.
func (f *Follower) runExec(ctx context.Context, p Placed) error {
	if f.opts.Exec == "" {
		return nil
	}
	dir, err := absDir(p.Dir)
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, "sh", "-c", f.opts.Exec)
	cmd.Env = append(os.Environ(), "FERRY_STEP="+strconv.FormatInt(p.Step, 10), "FERRY_STEP_DIR="+dir,
		"FERRY_REVISION="+strconv.Itoa(p.Revision), "FERRY_FROM="+f.opts.From)
	cmd.Stdout, cmd.Stderr = f.opts.Stdout, f.opts.Stderr
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = execWait
	start := time.Now()
	f.log.Info("running --exec", zap.Int64("step", p.Step), zap.String("dir", dir))
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%q for step %d: %w", f.opts.Exec, p.Step, err)
	}
	f.log.Info("--exec finished", zap.Int64("step", p.Step), zap.Duration("took", time.Since(start).Round(time.Millisecond)))
	return nil
}

func absDir(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("step folder: %w", err)
	}
	return abs, nil
}
