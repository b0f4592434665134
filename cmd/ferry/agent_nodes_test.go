package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/agent/control"
	"github.com/ferrylabs/ferry/internal/remote"
	"github.com/ferrylabs/ferry/internal/s3test"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/internal/trainsim"
	"github.com/ferrylabs/ferry/manifest"
)

// writeNodeStep writes node k's share of a Composer step of a job with
// perNode ranks per node: the files of ranks k*perNode..(k+1)*perNode-1.
func writeNodeStep(t *testing.T, dir string, k, perNode int, step, size int64) {
	t.Helper()
	for r := k * perNode; r < (k+1)*perNode; r++ {
		writeFile(t, filepath.Join(dir, trainsim.FileName(0, step, r)), trainsim.Content(9, step, r, size))
	}
}

// nodeAgentArgs are the flags of node k's agent.
func nodeAgentArgs(bucket, watch, state string, k int) []string {
	return []string{"--watch", watch, "--to", "s3://" + bucket + "/run", "--state-dir", state, "--layout", "composer",
		"--settle", "300ms", "--expected-ranks", "2", "--part-size", "5MiB", "--metrics-addr", "off",
		"--nodes", "3", "--node-rank", fmt.Sprint(k)}
}

// checkMergedManifests fails unless every committed step's manifest is the
// merge of its 3 parts, byte for byte.
func checkMergedManifests(t *testing.T, st store.Store, steps []int64) {
	t.Helper()
	ctx := context.Background()
	for _, s := range steps {
		parts := make([]*manifest.Part, 3)
		for k := range 3 {
			p, err := remote.GetPart(ctx, st, "run", manifest.PartSet{Step: s, Nodes: 3}, k)
			if err != nil {
				t.Fatalf("step %d: %v", s, err)
			}
			parts[k] = p
		}
		want, err := manifest.MergeParts(parts)
		if err != nil {
			t.Fatal(err)
		}
		wantBytes, _ := manifest.Encode(want)
		rc, err := st.Get(ctx, manifest.ManifestKey("run", s), 0, -1)
		if err != nil {
			t.Fatalf("step %d: %v", s, err)
		}
		got, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(wantBytes) {
			t.Fatalf("step %d: the manifest is not the merge of its parts", s)
		}
	}
}

// TestAgentThreeNodes runs three `ferry agent` processes as three nodes of
// a 6-rank job (separate watch and state dirs, one bucket). 20 steps found
// at once make every final commit a race: each is committed exactly once,
// with the manifest any node would write. Then node 2's agent is killed
// while uploading step 21: the step stays invisible to list and restore
// until node 2's agent runs again and commits it.
func TestAgentThreeNodes(t *testing.T) {
	srv := s3test.Shared(t)
	bucket := srv.NewBucket(t)
	st := srv.Store(t, bucket)
	proxy := startCountingProxy(t, srv.Endpoint)
	env := agentEnv(srv, proxy.URL)
	const rounds = 20
	watch := make([]string, 3)
	state := make([]string, 3)
	for k := range 3 {
		watch[k], state[k] = t.TempDir(), t.TempDir()
		for s := int64(1); s <= rounds; s++ {
			writeNodeStep(t, watch[k], k, 2, s, 4096)
		}
	}
	agents := make([]*agentProcess, 3)
	for k := range 3 {
		agents[k] = startAgentProcess(t, env, nodeAgentArgs(bucket, watch[k], state[k], k)...)
	}
	waitFor(t, "20 steps committed", 60*time.Second, func() bool { return len(committed(t, st, "run")) == rounds })
	// Let every agent finish the commit race it may still be in.
	for k := range 3 {
		waitFor(t, fmt.Sprintf("node %d done", k), 30*time.Second, func() bool {
			r := ferry(t, nil, "status", "--state-dir", state[k], "--json")
			var s control.Status
			if r.code != 0 || decodeJSONErr(r.stdout, &s) != nil {
				return false
			}
			// A node that committed a step reports it committed; one whose
			// share was durable before the last node's reports node-done.
			for _, ss := range s.Steps {
				if ss.State != control.StateCommitted && ss.State != control.StateNodeDone {
					return false
				}
			}
			return len(s.Steps) == rounds
		})
	}
	if n := proxy.manifestWrites.Load(); n != rounds {
		t.Fatalf("%d manifest writes succeeded for %d steps", n, rounds)
	}
	steps := committed(t, st, "run")
	checkMergedManifests(t, st, steps)
	m, _ := remote.Get(context.Background(), st, "run", 7)
	if m.Nodes != 3 || len(m.Files) != 6 {
		t.Fatalf("step 7: %d nodes, %d files", m.Nodes, len(m.Files))
	}

	// Node 2 restarts slowed down, and is killed in the middle of step 21.
	_ = agents[2].Process.Signal(syscall.SIGKILL)
	_ = agents[2].Wait()
	slow := startCountingProxy(t, srv.Endpoint)
	agents[2] = startAgentProcess(t, agentEnv(srv, slow.URL), append(nodeAgentArgs(bucket, watch[2], state[2], 2), "--bandwidth", "4MiB/s")...)
	for k := range 3 {
		size := int64(1 << 20)
		if k == 2 {
			size = 16 << 20
		}
		writeNodeStep(t, watch[k], k, 2, 21, size)
	}
	waitFor(t, "node 2 halfway through step 21", 30*time.Second, func() bool { return slow.bodyBytes.Load() > 6<<20 })
	_ = agents[2].Process.Signal(syscall.SIGKILL)
	_ = agents[2].Wait()
	waitFor(t, "nodes 0 and 1 done with step 21", 30*time.Second, func() bool {
		_, e0 := remote.GetPart(context.Background(), st, "run", manifest.PartSet{Step: 21, Nodes: 3}, 0)
		_, e1 := remote.GetPart(context.Background(), st, "run", manifest.PartSet{Step: 21, Nodes: 3}, 1)
		return e0 == nil && e1 == nil
	})
	var rows []stepSummary
	decodeJSON(t, ferry(t, srv, "list", "--from", "s3://"+bucket+"/run", "--json").must(t, 0).stdout, &rows)
	if len(rows) != rounds || rows[len(rows)-1].Step != rounds {
		t.Fatalf("with node 2 killed, list shows %d steps, the last %d", len(rows), rows[len(rows)-1].Step)
	}
	var rs restoreSummary
	decodeJSON(t, ferry(t, srv, "restore", "--from", "s3://"+bucket+"/run", "--to", t.TempDir(), "--json").must(t, 0).stdout, &rs)
	if rs.Step != rounds {
		t.Fatalf("restore took step %d, want %d", rs.Step, rounds)
	}
	agents[2] = startAgentProcess(t, env, nodeAgentArgs(bucket, watch[2], state[2], 2)...)
	waitFor(t, "step 21 committed after node 2's restart", 60*time.Second, func() bool {
		return slices.Contains(committed(t, st, "run"), 21)
	})
	checkMergedManifests(t, st, []int64{21})
	dst := t.TempDir()
	decodeJSON(t, ferry(t, srv, "restore", "--from", "s3://"+bucket+"/run", "--to", dst, "--json").must(t, 0).stdout, &rs)
	for r := range 6 {
		size := int64(1 << 20)
		if r >= 4 {
			size = 16 << 20
		}
		got, err := os.ReadFile(filepath.Join(dst, trainsim.FileName(0, 21, r)))
		if err != nil || string(got) != string(trainsim.Content(9, 21, r, size)) {
			t.Errorf("step 21 rank %d restored wrong: %v", r, err)
		}
	}
	for _, a := range agents {
		_ = a.Process.Signal(syscall.SIGTERM)
		_ = a.Wait()
	}
	if n := proxy.manifestWrites.Load() + slow.manifestWrites.Load(); n != rounds+1 {
		t.Errorf("%d manifest writes succeeded for %d steps", n, rounds+1)
	}
}

func decodeJSONErr(s string, v any) error { return json.Unmarshal([]byte(s), v) }

// TestAgentDedupAndKeepRemote runs one agent over a Hugging Face output dir
// whose checkpoints are 80% unchanged by bytes from one to the next: the
// agent sends about 20% for every step after the first (its status says),
// and --keep-remote 2 leaves the 2 newest steps, which restore.
func TestAgentDedupAndKeepRemote(t *testing.T) {
	srv := s3test.Shared(t)
	bucket := srv.NewBucket(t)
	st := srv.Store(t, bucket)
	watch, state := t.TempDir(), t.TempDir()
	a := startAgentProcess(t, srv.Env(), "--watch", watch, "--to", "s3://"+bucket+"/run", "--state-dir", state, "--layout", "hf",
		"--settle", "300ms", "--part-size", "5MiB", "--metrics-addr", "off", "--keep-remote", "2")
	frozen := randomBytes(8*mib, 1)
	const total = 10 * mib
	for i, step := range []int64{100, 200, 300} {
		dir := filepath.Join(watch, fmt.Sprintf("checkpoint-%d", step))
		writeFile(t, filepath.Join(dir, "frozen-encoder.safetensors"), frozen)
		writeFile(t, filepath.Join(dir, "adapter.safetensors"), randomBytes(2*mib, byte(10+i)))
		writeFile(t, filepath.Join(dir, "trainer_state.json"), []byte(fmt.Sprintf(`{"global_step": %d}`, step)))
		waitFor(t, fmt.Sprintf("step %d committed", step), 30*time.Second, func() bool {
			s, err := remote.LatestStep(context.Background(), st, "run")
			return err == nil && s == step
		})
	}
	var s control.Status
	waitFor(t, "status of 3 committed steps", 10*time.Second, func() bool {
		r := ferry(t, nil, "status", "--state-dir", state, "--json")
		return r.code == 0 && decodeJSONErr(r.stdout, &s) == nil && s.LastCommitted == 300
	})
	for _, ss := range s.Steps {
		share := float64(ss.BytesSent) / total
		t.Logf("step %d: sent %d of %d bytes (%.1f%%)", ss.Step, ss.BytesSent, ss.Bytes, 100*share)
		if ss.Step > 100 && (share < 0.15 || share > 0.30) {
			t.Errorf("step %d sent %.1f%% of its bytes, want about 20%%", ss.Step, 100*share)
		}
	}
	_ = a.Process.Signal(syscall.SIGTERM)
	_ = a.Wait()
	if got := committed(t, st, "run"); !slices.Equal(got, []int64{300, 200}) {
		t.Fatalf("after --keep-remote 2: committed %v", got)
	}
	for _, step := range []int64{200, 300} {
		dst := t.TempDir()
		ferry(t, srv, "restore", "--from", "s3://"+bucket+"/run", "--to", dst, "--step", fmt.Sprint(step)).must(t, 0)
		got, _ := os.ReadFile(filepath.Join(dst, fmt.Sprintf("checkpoint-%d", step), "frozen-encoder.safetensors"))
		if string(got) != string(frozen) {
			t.Errorf("step %d: frozen file restored wrong", step)
		}
	}
}
