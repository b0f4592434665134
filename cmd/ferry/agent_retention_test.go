package main

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/internal/remote"
	"github.com/ferrylabs/ferry/internal/s3test"
)

// The agent's remote retention takes prune's keep-every rule: on a real
// S3 server, an agent with --keep-remote 1 --keep-remote-every 200 that
// commits steps 100, 200 and 300 leaves 300 (the newest) and 200 (every
// 200th) and prunes 100; --keep-remote-every without --keep-remote is
// refused in one line (exit 2). Old code has no such flag: the agent does
// not start, and no step is committed.
func TestAgentKeepRemoteEvery(t *testing.T) {
	srv := s3test.Shared(t)
	bucket := srv.NewBucket(t)
	st := srv.Store(t, bucket)
	watch, state := t.TempDir(), t.TempDir()
	a := startAgentProcess(t, srv.Env(), "--watch", watch, "--to", "s3://"+bucket+"/run", "--state-dir", state, "--layout", "hf",
		"--settle", "300ms", "--metrics-addr", "off", "--keep-remote", "1", "--keep-remote-every", "200")
	for i, step := range []int64{100, 200, 300} {
		dir := filepath.Join(watch, fmt.Sprintf("checkpoint-%d", step))
		writeFile(t, filepath.Join(dir, "model.safetensors"), randomBytes(64<<10, byte(20+i)))
		writeFile(t, filepath.Join(dir, "trainer_state.json"), []byte(fmt.Sprintf(`{"global_step": %d}`, step)))
		waitFor(t, fmt.Sprintf("step %d committed", step), 30*time.Second, func() bool {
			s, err := remote.LatestStep(context.Background(), st, "run")
			return err == nil && s == step
		})
	}
	waitFor(t, "step 100 pruned, 200 kept", 15*time.Second, func() bool {
		return slices.Equal(committed(t, st, "run"), []int64{300, 200})
	})
	_ = a.Process.Signal(syscall.SIGTERM)
	_ = a.Wait()
	if got := committed(t, st, "run"); !slices.Equal(got, []int64{300, 200}) {
		t.Fatalf("after --keep-remote 1 --keep-remote-every 200: committed %v", got)
	}
	r := ferry(t, srv, "agent", "--watch", watch, "--to", "s3://"+bucket+"/run", "--keep-remote-every", "200").must(t, exitUsage)
	if !containsAll(r.stderr, "--keep-remote-every 200 needs --keep-remote N") {
		t.Errorf("stderr: %s", r.stderr)
	}
}
