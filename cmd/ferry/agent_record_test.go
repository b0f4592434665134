package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/agent/control"
	"github.com/ferrylabs/ferry/internal/remote"
	"github.com/ferrylabs/ferry/internal/s3test"
	"github.com/ferrylabs/ferry/manifest"
)

// copyDCPFiles copies the named files of a real torch 2.6 save
// (testdata/dcp-records/<src>) into dir/step-100, dated a minute back, with
// .metadata a second newer than the shards, as torch writes them.
func copyDCPFiles(t *testing.T, src, dir string, names ...string) string {
	t.Helper()
	to := filepath.Join(dir, "step-100")
	if err := os.MkdirAll(to, 0o755); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Minute)
	for _, n := range names {
		data, err := os.ReadFile(filepath.Join("../../testdata/dcp-records", src, n))
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(to, n)
		writeFile(t, p, data)
		when := old
		if n == ".metadata" {
			when = old.Add(time.Second)
		}
		if err := os.Chtimes(p, when, when); err != nil {
			t.Fatal(err)
		}
	}
	return to
}

// TestAgentTwoNodesDCPRecord is issue 46's first case with the writer
// gone. Both nodes get the same settings, as the SLURM and Kubernetes
// templates give them: node 1 detects without the marker by itself, as
// no .metadata ever reaches it. Node 1 holds rank 1's
// shard cut short and closed (a writer killed mid-save), which no timing
// rule on node 1 can tell from a whole one; node 0 holds .metadata and rank
// 0's shard. Node 0's part carries what .metadata records, so the merge
// refuses the union: step 100 is never committed, and the log names the
// file, the size found and the size recorded, once. The same job with the shard
// whole commits both files.
func TestAgentTwoNodesDCPRecord(t *testing.T) {
	srv := s3test.Shared(t)
	for _, torn := range []bool{true, false} {
		bucket := srv.NewBucket(t)
		st := srv.Store(t, bucket)
		watch := []string{t.TempDir(), t.TempDir()}
		copyDCPFiles(t, "world2", watch[0], ".metadata", "__0_0.distcp")
		node1 := copyDCPFiles(t, "world2", watch[1], "__1_0.distcp")
		if torn {
			shard := filepath.Join(node1, "__1_0.distcp")
			fi, _ := os.Stat(shard)
			if err := os.Truncate(shard, 2988); err != nil {
				t.Fatal(err)
			}
			_ = os.Chtimes(shard, fi.ModTime(), fi.ModTime())
		}
		agents := make([]*agentProcess, 2)
		state := []string{t.TempDir(), t.TempDir()}
		for k := range 2 {
			args := []string{"--watch", watch[k], "--to", "s3://" + bucket + "/run", "--state-dir", state[k], "--layout", "dcp",
				"--settle", "300ms", "--metrics-addr", "off", "--nodes", "2", "--node-rank", []string{"0", "1"}[k]}
			agents[k] = startAgentProcess(t, agentEnv(srv, srv.Endpoint), args...)
		}
		ctx := context.Background()
		set := manifest.PartSet{Step: 100, Nodes: 2}
		waitFor(t, "both parts of step 100", 30*time.Second, func() bool {
			_, e0 := remote.GetPart(ctx, st, "run", set, 0)
			_, e1 := remote.GetPart(ctx, st, "run", set, 1)
			return e0 == nil && e1 == nil
		})
		if !torn {
			waitFor(t, "step 100 committed", 30*time.Second, func() bool { return len(committed(t, st, "run")) == 1 })
			m, err := remote.Get(ctx, st, "run", 100)
			if err != nil || len(m.Files) != 3 {
				t.Fatalf("whole step: %v, %v", m, err)
			}
			// Issue 46 item 5: the node that did not merge learns the
			// commit too (its status, and what its peers port holds).
			for k := range 2 {
				waitFor(t, fmt.Sprintf("node %d knows step 100 committed", k), 15*time.Second, func() bool {
					r := ferry(t, nil, "status", "--state-dir", state[k], "--json")
					var s control.Status
					return r.code == 0 && decodeJSONErr(r.stdout, &s) == nil && s.LastCommitted == 100
				})
			}
			continue
		}
		want := "step-100/__1_0.distcp is 2988 bytes, step-100/.metadata records 5976"
		waitFor(t, "the merge refused with the sizes named", 30*time.Second, func() bool {
			return strings.Contains(agents[0].logs.String()+agents[1].logs.String(), want)
		})
		time.Sleep(2 * time.Second) // a retry would have run
		if steps := committed(t, st, "run"); len(steps) != 0 {
			t.Fatalf("torn step committed: %v", steps)
		}
		// A part is immutable: retrying the merge cannot help, so the step
		// fails once, loudly, instead of a retry loop.
		logs := agents[0].logs.String() + agents[1].logs.String()
		if !strings.Contains(logs, "disagree with what its framework recorded") || strings.Contains(logs, "will retry") {
			t.Fatalf("want one error naming the record and no retry; logs:\n%s", logs)
		}
	}
}

// Issue 46 item 4: ferry commit from each node's local rank 0 after
// dcp.save returns (DCP returns on every rank only after .metadata is
// written), every node with the same settings (an hour's settle window, so
// that only the declarations can commit): each node's command exits 0
// once its part is durable, the step is committed with every node's
// files, and both nodes' status name it.
func TestAgentTwoNodesCommitFromLocalRankZero(t *testing.T) {
	srv := s3test.Shared(t)
	bucket := srv.NewBucket(t)
	st := srv.Store(t, bucket)
	watch := []string{t.TempDir(), t.TempDir()}
	state := []string{t.TempDir(), t.TempDir()}
	for k := range 2 {
		args := []string{"--watch", watch[k], "--to", "s3://" + bucket + "/run", "--state-dir", state[k], "--layout", "dcp",
			"--settle", "1h", "--metrics-addr", "off", "--nodes", "2", "--node-rank", fmt.Sprint(k)}
		startAgentProcess(t, agentEnv(srv, srv.Endpoint), args...)
		waitFor(t, fmt.Sprintf("node %d's agent answers", k), 15*time.Second, func() bool {
			return ferry(t, nil, "status", "--state-dir", state[k]).code == 0
		})
	}
	copyDCPFiles(t, "world2", watch[0], ".metadata", "__0_0.distcp")
	copyDCPFiles(t, "world2", watch[1], "__1_0.distcp")
	done := make(chan result, 2)
	for k := range 2 {
		go func() {
			done <- ferry(t, nil, "commit", "--step", "100", "--watch", watch[k], "--state-dir", state[k], "--timeout", "60s", "step-100")
		}()
	}
	for range 2 {
		if r := <-done; r.code != 0 {
			t.Fatalf("ferry commit on a node: exit %d: %s", r.code, r.stderr)
		}
	}
	waitFor(t, "step 100 committed", 30*time.Second, func() bool { return len(committed(t, st, "run")) == 1 })
	m, err := remote.Get(context.Background(), st, "run", 100)
	if err != nil || len(m.Files) != 3 {
		t.Fatalf("step 100: %v files, %v; want .metadata and both shards", m, err)
	}
	for k := range 2 {
		waitFor(t, fmt.Sprintf("node %d knows step 100 committed", k), 15*time.Second, func() bool {
			r := ferry(t, nil, "status", "--state-dir", state[k], "--json")
			var s control.Status
			return r.code == 0 && decodeJSONErr(r.stdout, &s) == nil && s.LastCommitted == 100
		})
	}
}
