package main

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/internal/s3proxy"
	"github.com/ferrylabs/ferry/internal/s3test"
	"github.com/ferrylabs/ferry/manifest"
)

// pushDCPStep pushes a DCP-like step-N/ folder (a .metadata and a shard
// per rank) as step n and returns the run's URL.
func pushDCPStep(t *testing.T, srv *s3test.Server, url string, n int64, ranks int) {
	t.Helper()
	src := t.TempDir()
	name := fmt.Sprintf("step-%d", n)
	writeFile(t, filepath.Join(src, name, ".metadata"), randomBytes(2000, byte(n)))
	for r := range ranks {
		writeFile(t, filepath.Join(src, name, fmt.Sprintf("__%d_0.distcp", r)), randomBytes(30000+r, byte(int(n)+r+1)))
	}
	ferry(t, srv, "push", "--to", url, "--step", fmt.Sprint(n), "--pack=false", src).must(t, 0)
}

// A node of a 3-node job that never restores: the two others, with a
// short --barrier-timeout, wait for it, then each exits 1 with one line
// naming node 2 and what to do, placing nothing (no file, no temp file in
// their folders), --json's barrier saying the same. Their check-ins stay
// in the bucket for prune.
func TestCLIRestoreBarrierTimeout(t *testing.T) {
	srv := s3test.Shared(t)
	bucket := srv.NewBucket(t)
	url := "s3://" + bucket + "/run"
	pushDCPStep(t, srv, url, 7, 3)
	type out struct {
		r   result
		dir string
	}
	outs := make([]out, 2)
	var wg sync.WaitGroup
	start := time.Now()
	for k := range outs {
		outs[k].dir = filepath.Join(t.TempDir(), "ckpt")
		cmd := ferryCmd(t, srv, "restore", "--from", url, "--to", outs[k].dir, "--on-damaged", "previous", "--json",
			"--ranks", fmt.Sprint(k), "--nodes", "3", "--node-rank", fmt.Sprint(k), "--run-id", "job-9.0", "--barrier-timeout", "2s")
		wg.Go(func() { outs[k].r = runCmd(t, cmd) })
	}
	wg.Wait()
	took := time.Since(start)
	if took < 2*time.Second || took > 30*time.Second {
		t.Errorf("the restores took %v; want about the timeout, 2s", took)
	}
	for k, o := range outs {
		o.r.must(t, exitFailure)
		want := "restore barrier of step 7 (run job-9.0, 3 nodes): node 2 never checked in within 2s, so this node placed nothing: run ferry restore on every node with the same --run-id and --nodes"
		if !strings.Contains(o.r.stderr, want) {
			t.Errorf("node %d: stderr %q; want %q", k, o.r.stderr, want)
		}
		var sum restoreSummary
		decodeJSON(t, o.r.stdout, &sum)
		b := sum.Barrier
		if b == nil || b.Run != "job-9.0" || b.Nodes != 3 || b.Node != k || len(b.Steps) != 1 || b.Steps[0].Outcome != "timed out" ||
			!slices.Equal(b.Steps[0].Missing, []int{2}) || !strings.Contains(sum.Error, "node 2 never checked in") {
			t.Errorf("node %d: --json %s", k, o.r.stdout)
		}
		// The folder the restore made is gone again; had it been there,
		// it would hold nothing.
		if _, err := os.Stat(o.dir); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("node %d: a restore whose barrier timed out left %s (%v): %v", k, o.dir, err, holdsExactly(o.dir, nil))
		}
	}
	st := srv.Store(t, bucket)
	set := manifest.PartSet{Step: 7, Nodes: 3, Run: "job-9.0"}
	for k := range 2 {
		if _, err := st.Head(t.Context(), manifest.RestoreCheckinKey("run", set, k)); err != nil {
			t.Errorf("node %d's check-in: %v", k, err)
		}
	}
}

// Credentials that cannot write (every PUT refused) cannot check in: the
// restore fails at once, placing nothing, and says what the barrier needs
// and how to restore without it; --barrier-timeout 0 then restores.
func TestCLIRestoreBarrierReadOnly(t *testing.T) {
	srv := s3test.Shared(t)
	bucket := srv.NewBucket(t)
	pushDCPStep(t, srv, "s3://"+bucket+"/run", 3, 2)
	ro, _ := srv.WithProxy(t, s3proxy.Config{Rules: []s3proxy.Rule{{Ops: []string{s3proxy.OpPutObject}, Action: s3proxy.Status(403, "AccessDenied")}}})
	args := []string{"restore", "--from", "s3://" + bucket + "/run", "--to", filepath.Join(t.TempDir(), "ckpt"),
		"--ranks", "0", "--nodes", "2", "--node-rank", "0", "--run-id", "ro-1"}
	start := time.Now()
	r := ferry(t, ro, args...).must(t, exitFailure)
	if !strings.Contains(r.stderr, "restore barrier of step 3: cannot check in: access denied (AccessDenied): check the credentials") ||
		!strings.Contains(r.stderr, "; nothing placed: the barrier needs credentials that can write under run/checkins/ (or restore without it: --barrier-timeout 0)") ||
		time.Since(start) > 20*time.Second {
		t.Errorf("read-only restore with a barrier (%v): %s", time.Since(start), r.stderr)
	}
	if _, err := os.Stat(args[5]); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the failed restore left %s: %v", args[5], err)
	}
	ferry(t, ro, append(args, "--barrier-timeout", "0")...).must(t, 0)
}

// runCmd runs a prepared ferry command to completion.
func runCmd(t *testing.T, cmd *exec.Cmd) result {
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	r := result{stdout: o.String(), stderr: e.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Errorf("run ferry: %v", err)
		r.code = -1
	}
	return r
}

// Where a restore learns which node of how many it is: whole restores of
// two nodes named by FERRY_NODES, FERRY_NODE_RANK and FERRY_RUN_ID meet at
// the barrier and say so. A restore in a SLURM batch script (SLURM_NODEID
// and SLURM_JOB_NUM_NODES, but no srun step) has no barrier: it would wait
// for nodes that never restore. Restoring some ranks without a run
// identity warns that the nodes may place different steps.
func TestCLIRestoreBarrierIdentity(t *testing.T) {
	srv := s3test.Shared(t)
	url := "s3://" + srv.NewBucket(t) + "/run"
	pushDCPStep(t, srv, url, 3, 2)
	rs := make([]result, 2)
	var wg sync.WaitGroup
	for k := range rs {
		cmd := ferryCmd(t, srv, "restore", "--from", url, "--to", t.TempDir())
		cmd.Env = append(cmd.Env, "FERRY_NODES=2", fmt.Sprintf("FERRY_NODE_RANK=%d", k), "FERRY_RUN_ID=train-5")
		wg.Go(func() { rs[k] = runCmd(t, cmd) })
	}
	wg.Wait()
	for k, r := range rs {
		r.must(t, 0)
		if !strings.Contains(r.stdout, "barrier: all 2 nodes (run train-5) verified their files of step 3 before any placed it") {
			t.Errorf("node %d: %s", k, r.stdout)
		}
	}

	batch := ferryCmd(t, srv, "restore", "--from", url, "--to", t.TempDir(), "--json", "--barrier-timeout", "1s")
	batch.Env = append(batch.Env, "SLURM_JOB_ID=4242", "SLURM_NODEID=0", "SLURM_JOB_NUM_NODES=4", "SLURM_NNODES=4")
	r := runCmd(t, batch).must(t, 0)
	var sum restoreSummary
	decodeJSON(t, r.stdout, &sum)
	if sum.Step != 3 || sum.Barrier != nil {
		t.Errorf("restore in a batch script: step %d, barrier %+v; want step 3 without a barrier", sum.Step, sum.Barrier)
	}

	r = ferry(t, srv, "restore", "--from", url, "--to", t.TempDir(), "--ranks", "1").must(t, 0)
	if !strings.Contains(r.stderr, "restoring some ranks without the restore barrier") {
		t.Errorf("--ranks without a node or run: %s", r.stderr)
	}
	r = ferry(t, srv, "restore", "--from", url, "--to", t.TempDir(), "--ranks", "1", "--nodes", "2", "--node-rank", "1", "--json").must(t, 0)
	decodeJSON(t, r.stdout, &sum)
	if sum.Barrier == nil || !strings.Contains(sum.Barrier.Off, "no run identity") || !strings.Contains(r.stderr, "give --run-id") {
		t.Errorf("--ranks --nodes without a run: barrier %+v\n%s", sum.Barrier, r.stderr)
	}
}

// The restore's identity and run from flags and the environment.
func TestRestoreBarrierFrom(t *testing.T) {
	for _, c := range []struct {
		name  string
		o     restoreOptions
		env   map[string]string
		want  string // "" no barrier; else "run node/nodes"
		off   string
		error bool
	}{
		{name: "nothing", o: restoreOptions{nodeRank: -1}},
		{name: "flags", o: restoreOptions{nodes: 4, nodeRank: 2, runID: "r1", runIDSet: true}, want: "r1 2/4"},
		{name: "flags and SLURM's run", o: restoreOptions{nodes: 4, nodeRank: 2}, env: map[string]string{"SLURM_JOB_ID": "77", "SLURM_RESTART_COUNT": "3"}, want: "77.3 2/4"},
		{name: "one node", o: restoreOptions{nodes: 1, nodeRank: 0, runID: "r1", runIDSet: true}},
		{name: "no run", o: restoreOptions{nodes: 2, nodeRank: 0}, off: "no run identity"},
		{name: "off", o: restoreOptions{nodes: 2, nodeRank: 0, runID: "r1", runIDSet: true, barrierTimeout: -1}, off: "--barrier-timeout 0"},
		{name: "--step", o: restoreOptions{nodes: 2, nodeRank: 0, runID: "r1", runIDSet: true, step: 5}, off: "--step"},
		{name: "FERRY_", o: restoreOptions{nodeRank: -1}, env: map[string]string{"FERRY_NODES": "3", "FERRY_NODE_RANK": "1", "SLURM_JOB_ID": "9"}, want: "9.0 1/3"},
		{name: "FERRY_ half", o: restoreOptions{nodeRank: -1}, env: map[string]string{"FERRY_NODES": "3"}, error: true},
		{name: "srun step", o: restoreOptions{nodeRank: -1}, env: map[string]string{"SLURM_STEP_NUM_NODES": "8", "SLURM_NODEID": "7", "SLURM_JOB_NUM_NODES": "8", "SLURM_JOB_ID": "5"}, want: "5.0 7/8"},
		{name: "batch script", o: restoreOptions{nodeRank: -1}, env: map[string]string{"SLURM_NODEID": "0", "SLURM_JOB_NUM_NODES": "8", "SLURM_JOB_ID": "5"}},
		{name: "torchrun", o: restoreOptions{nodeRank: -1, runID: "t", runIDSet: true}, env: map[string]string{"WORLD_SIZE": "16", "LOCAL_WORLD_SIZE": "8", "GROUP_RANK": "1", "TORCHELASTIC_RUN_ID": "x"}, want: "t 1/2"},
		{name: "torchrun, no run", o: restoreOptions{nodeRank: -1}, env: map[string]string{"WORLD_SIZE": "16", "LOCAL_WORLD_SIZE": "8", "GROUP_RANK": "1", "TORCHELASTIC_RUN_ID": "x", "TORCHELASTIC_RESTART_COUNT": "0"}, off: "no run identity"},
		{name: "bad run", o: restoreOptions{nodes: 2, nodeRank: 0, runID: "a b", runIDSet: true}, error: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := c.o
			switch {
			case o.barrierTimeout == 0:
				o.barrierTimeout = time.Minute
			case o.barrierTimeout < 0:
				o.barrierTimeout = 0
			}
			if o.step == 0 {
				o.step = -1
			}
			b, sum, err := o.barrier(func(k string) string { return c.env[k] })
			if (err != nil) != c.error {
				t.Fatalf("error %v, want error %v", err, c.error)
			}
			got := ""
			if b != nil {
				got = fmt.Sprintf("%s %d/%d", b.Run, b.Node, b.Nodes)
			}
			if got != c.want {
				t.Errorf("barrier %q, want %q", got, c.want)
			}
			if c.off != "" && (sum == nil || !strings.Contains(sum.Off, c.off)) {
				t.Errorf("summary %+v; want off: %s", sum, c.off)
			}
		})
	}
}
