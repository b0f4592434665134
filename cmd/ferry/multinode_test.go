package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/ferrylabs/ferry/internal/remote"
	"github.com/ferrylabs/ferry/internal/s3proxy"
	"github.com/ferrylabs/ferry/internal/s3test"
	"github.com/ferrylabs/ferry/manifest"
)

// startFerry starts ferry in the background; wait collects its result.
func startFerry(t *testing.T, srv *s3test.Server, args ...string) (cmd *exec.Cmd, wait func() result) {
	t.Helper()
	cmd = ferryCmd(t, srv, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, func() result {
		err := cmd.Wait()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("run ferry: %v", err)
		}
		return result{code: code, stdout: out.String(), stderr: errb.String()}
	}
}

// rankDirs writes the files of a job of nodes x perNode ranks, each node's
// in its own directory: one file per rank, and a config on every node.
func rankDirs(t *testing.T, nodes, perNode, size int, step int64) []string {
	t.Helper()
	dirs := make([]string, nodes)
	for k := range nodes {
		dirs[k] = t.TempDir()
		for r := k * perNode; r < (k+1)*perNode; r++ {
			writeFile(t, filepath.Join(dirs[k], fmt.Sprintf("ep0-ba%d-rank%d.pt", step, r)), randomBytes(size, byte(int(step)*7+r)))
		}
		writeFile(t, filepath.Join(dirs[k], "config.json"), []byte(`{"lr": 0.1}`))
	}
	return dirs
}

// TestCLIMultiNodeCommitRaces runs three `ferry push --nodes 3` processes
// at once for each of 20 steps: every step is committed exactly once, by
// one node, with the manifest any node would compute from the parts.
func TestCLIMultiNodeCommitRaces(t *testing.T) {
	srv := s3test.Shared(t)
	bucket := srv.NewBucket(t)
	url := "s3://" + bucket + "/run"
	st := srv.Store(t, bucket)
	ctx := context.Background()
	const nodes, rounds = 3, 20
	contended := 0
	for step := int64(1); step <= rounds; step++ {
		dirs := rankDirs(t, nodes, 1, 100, step)
		waits := make([]func() result, nodes)
		for k := range nodes {
			_, waits[k] = startFerry(t, srv, "push", "--to", url, "--step", fmt.Sprint(step), "--nodes", "3", "--node-rank", fmt.Sprint(k),
				"--json", "--state-dir", t.TempDir(), dirs[k])
		}
		committed, sawManifest := 0, 0
		for k := range nodes {
			r := waits[k]().must(t, 0)
			var ps pushSummary
			decodeJSON(t, r.stdout, &ps)
			if ps.Committed {
				committed++
			}
			if !ps.Pending {
				sawManifest++
			}
		}
		if committed != 1 {
			t.Fatalf("step %d: %d nodes committed", step, committed)
		}
		if sawManifest > 1 {
			contended++
		}
		parts := make([]*manifest.Part, nodes)
		for k := range nodes {
			p, err := remote.GetPart(ctx, st, "run", manifest.PartSet{Step: step, Nodes: nodes}, k)
			if err != nil {
				t.Fatal(err)
			}
			parts[k] = p
		}
		want, err := manifest.MergeParts(parts)
		if err != nil {
			t.Fatal(err)
		}
		wantBytes, _ := manifest.Encode(want)
		got := ferry(t, srv, "show", "--from", url, "--step", fmt.Sprint(step)).must(t, 0).stdout
		if got != string(wantBytes) {
			t.Fatalf("step %d: committed manifest differs from the merge of its parts:\n%s\nwant\n%s", step, got, wantBytes)
		}
	}
	t.Logf("%d of %d rounds had more than one node find every part", contended, rounds)
	var rows []stepSummary
	decodeJSON(t, ferry(t, srv, "list", "--from", url, "--json").must(t, 0).stdout, &rows)
	if len(rows) != rounds {
		t.Fatalf("list shows %d steps, want %d", len(rows), rounds)
	}
	for _, r := range rows {
		if r.Files != 4 { // 3 rank files and the shared config, once
			t.Errorf("step %d has %d files", r.Step, r.Files)
		}
	}
	decodeJSON(t, ferry(t, srv, "list", "--from", url, "--json", "--last", "3").must(t, 0).stdout, &rows)
	if len(rows) != 3 || rows[0].Step != rounds-2 || rows[2].Step != rounds {
		t.Fatalf("list --last 3: %+v, want steps %d..%d oldest first", rows, rounds-2, rounds)
	}
}

// TestCLIMultiNodeKilledNode: node 2 of 3 is killed while uploading step
// 20; the step stays invisible to list and restore (which returns step
// 10), and is committed when node 2 runs again.
func TestCLIMultiNodeKilledNode(t *testing.T) {
	srv := s3test.Shared(t)
	bucket := srv.NewBucket(t)
	url := "s3://" + bucket + "/run"
	for _, step := range []int64{10, 20} {
		dirs := rankDirs(t, 3, 1, 20*mib, step)
		for k := range 2 {
			ferry(t, srv, "push", "--to", url, "--step", fmt.Sprint(step), "--nodes", "3", "--node-rank", fmt.Sprint(k), "--part-size", "5MiB", dirs[k]).must(t, 0)
		}
		state := t.TempDir()
		args := []string{"push", "--to", url, "--step", fmt.Sprint(step), "--nodes", "3", "--node-rank", "2", "--part-size", "5MiB", "--state-dir", state}
		if step == 20 {
			cmd, wait := startFerry(t, srv, append(args, "--bandwidth", "4MiB/s", "--concurrency", "1", dirs[2])...)
			client := srv.Client(t)
			waitFor(t, "a whole part of node 2's upload on the server", 60*time.Second, func() bool {
				key, id := recordedUpload(t, state)
				if id == "" {
					return false
				}
				parts, err := client.ListParts(context.Background(), &s3.ListPartsInput{Bucket: aws.String(bucket), Key: aws.String(key), UploadId: aws.String(id)})
				return err == nil && len(parts.Parts) > 0 && aws.ToInt64(parts.Parts[0].Size) == 5*mib
			})
			_ = cmd.Process.Signal(syscall.SIGKILL)
			wait()
			var rows []stepSummary
			decodeJSON(t, ferry(t, srv, "list", "--from", url, "--json").must(t, 0).stdout, &rows)
			if len(rows) != 1 || rows[0].Step != 10 {
				t.Fatalf("with node 2 killed, list = %+v; want only step 10", rows)
			}
			dst := t.TempDir()
			var rs restoreSummary
			decodeJSON(t, ferry(t, srv, "restore", "--from", url, "--to", dst, "--json").must(t, 0).stdout, &rs)
			if rs.Step != 10 {
				t.Fatalf("restore took step %d, want 10", rs.Step)
			}
		}
		r := ferry(t, srv, append(args, "--json", dirs[2])...).must(t, 0)
		var ps pushSummary
		decodeJSON(t, r.stdout, &ps)
		if !ps.Committed {
			t.Fatalf("step %d: node 2's push did not commit: %+v", step, ps)
		}
		// SeaweedFS lists parts without their checksums: the restarted
		// node sends them again rather than trust them
		// (docs/compatibility.md).
		if step == 20 && ps.PartsReused == 0 && srv.Kind() != s3test.SeaweedFS {
			t.Errorf("the restarted node resumed no part: %+v", ps)
		}
	}
	dst := t.TempDir()
	var rs restoreSummary
	decodeJSON(t, ferry(t, srv, "restore", "--from", url, "--to", dst, "--json").must(t, 0).stdout, &rs)
	if rs.Step != 20 || rs.Files != 4 {
		t.Fatalf("restore after the restart: %+v", rs)
	}
}

// TestCLIRestoreOntoOtherClusterSizes pushes a 4-rank job from 2 nodes and
// restores it onto 1, 2 and 4 nodes, and with --ranks, checking every file.
func TestCLIRestoreOntoOtherClusterSizes(t *testing.T) {
	srv := s3test.Shared(t)
	url := "s3://" + srv.NewBucket(t) + "/run"
	dirs := rankDirs(t, 2, 2, 1000, 5)
	for k := range 2 {
		ferry(t, srv, "push", "--to", url, "--step", "5", "--nodes", "2", "--node-rank", fmt.Sprint(k), dirs[k]).must(t, 0)
	}
	rankFile := func(r int) string { return fmt.Sprintf("ep0-ba5-rank%d.pt", r) }
	check := func(dst string, want []int) {
		t.Helper()
		for r := range 4 {
			p := filepath.Join(dst, rankFile(r))
			data, err := os.ReadFile(p)
			switch {
			case slices.Contains(want, r) && err != nil:
				t.Errorf("%s: rank %d missing: %v", dst, r, err)
			case slices.Contains(want, r) && !bytes.Equal(data, randomBytes(1000, byte(5*7+r))):
				t.Errorf("%s: rank %d differs", dst, r)
			case !slices.Contains(want, r) && err == nil:
				t.Errorf("%s: rank %d restored, not wanted", dst, r)
			}
		}
		if data, err := os.ReadFile(filepath.Join(dst, "config.json")); err != nil || string(data) != `{"lr": 0.1}` {
			t.Errorf("%s: shared config.json: %q %v", dst, data, err)
		}
	}
	for _, nodes := range []int{1, 2, 4} {
		per := 4 / nodes
		for k := range nodes {
			dst := t.TempDir()
			var rs restoreSummary
			decodeJSON(t, ferry(t, srv, "restore", "--from", url, "--to", dst, "--nodes", fmt.Sprint(nodes), "--node-rank", fmt.Sprint(k), "--json").must(t, 0).stdout, &rs)
			var want []int
			for r := k * per; r < (k+1)*per; r++ {
				want = append(want, r)
			}
			check(dst, want)
			if !strings.Contains(rs.Selection, fmt.Sprintf("node %d of %d", k, nodes)) {
				t.Errorf("selection %q", rs.Selection)
			}
		}
	}
	dst := t.TempDir()
	ferry(t, srv, "restore", "--from", url, "--to", dst, "--ranks", "0,2-3").must(t, 0)
	check(dst, []int{0, 2, 3})
	r := ferry(t, srv, "restore", "--from", url, "--to", t.TempDir(), "--nodes", "3", "--node-rank", "0").must(t, 1)
	if !strings.Contains(r.stderr, "do not split evenly over 3 nodes") {
		t.Errorf("4 ranks onto 3 nodes: %q", r.stderr)
	}
	// With --ranks, --nodes and --node-rank only name the node for the
	// restore barrier (restore_barrier.go): the ranks select the files.
	dst = t.TempDir()
	ferry(t, srv, "restore", "--from", url, "--to", dst, "--ranks", "1", "--nodes", "2", "--node-rank", "0").must(t, 0)
	check(dst, []int{1})
	ferry(t, srv, "restore", "--from", url, "--to", t.TempDir(), "--ranks", "0", "--nodes", "2", "--node-rank", "2").must(t, 2)
}

// TestCLIDedup: a checkpoint whose bytes are 80% unchanged between two
// steps; the second push sends about 20% of them.
func TestCLIDedup(t *testing.T) {
	srv := s3test.Shared(t)
	url := "s3://" + srv.NewBucket(t) + "/run"
	src := t.TempDir()
	sizes := map[string]int{"frozen-encoder.pt": 12 * mib, "tokenizer.bin": 4 * mib, "config.json": 2000, "embeddings.pt": 8*mib - 2000, "rank0-optim.pt": 6 * mib}
	total := 0
	for name, n := range sizes {
		writeFile(t, filepath.Join(src, name), randomBytes(n, byte(len(name))))
		total += n
	}
	ferry(t, srv, "push", "--to", url, "--step", "100", "--part-size", "5MiB", src).must(t, 0)
	writeFile(t, filepath.Join(src, "rank0-optim.pt"), randomBytes(6*mib, 99)) // 20% of the bytes change
	var ps pushSummary
	decodeJSON(t, ferry(t, srv, "push", "--to", url, "--step", "200", "--part-size", "5MiB", "--json", src).must(t, 0).stdout, &ps)
	share := float64(ps.BytesSent) / float64(total)
	t.Logf("second step: sent %d of %d bytes (%.1f%%), deduplicated %d bytes in %d files", ps.BytesSent, total, 100*share, ps.DedupBytes, ps.DedupFiles)
	if share < 0.15 || share > 0.30 || ps.DedupFiles != 4 || ps.DedupBytes+ps.BytesSent != int64(total) {
		t.Fatalf("second push: %+v", ps)
	}
	dst := t.TempDir()
	ferry(t, srv, "restore", "--from", url, "--to", dst).must(t, 0)
	sameTree(t, src, dst)
}

// TestCLIPrune: --dry-run lists exactly what the real run deletes, and
// every kept step still restores and verifies.
func TestCLIPrune(t *testing.T) {
	srv := s3test.Shared(t)
	url := "s3://" + srv.NewBucket(t) + "/run"
	src := t.TempDir()
	writeFile(t, filepath.Join(src, "frozen.pt"), randomBytes(300_000, 1))
	for step := 1; step <= 6; step++ {
		writeFile(t, filepath.Join(src, "weights.pt"), randomBytes(200_000, byte(10+step)))
		ferry(t, srv, "push", "--to", url, "--step", fmt.Sprint(step*100), src).must(t, 0)
	}
	args := []string{"prune", "--from", url, "--keep-last", "2", "--keep-every", "300", "--min-age", "0", "--json"}
	var dry, real pruneSummary
	decodeJSON(t, ferry(t, srv, append(args, "--dry-run")...).must(t, 0).stdout, &dry)
	decodeJSON(t, ferry(t, srv, args...).must(t, 0).stdout, &real)
	if !dry.DryRun || real.DryRun || len(real.Deleted) == 0 || !slices.Equal(dry.Deleted, real.Deleted) {
		t.Fatalf("dry run deleted %v\nreal run deleted %v", dry.Deleted, real.Deleted)
	}
	if !slices.Equal(real.Kept, []int64{600, 500, 300}) || !slices.Equal(real.Pruned, []int64{400, 200, 100}) {
		t.Fatalf("kept %v pruned %v", real.Kept, real.Pruned)
	}
	var rows []stepSummary
	decodeJSON(t, ferry(t, srv, "list", "--from", url, "--json").must(t, 0).stdout, &rows)
	if len(rows) != 3 {
		t.Fatalf("list after prune: %+v", rows)
	}
	for _, r := range rows {
		ferry(t, srv, "restore", "--from", url, "--to", t.TempDir(), "--step", fmt.Sprint(r.Step)).must(t, 0)
	}
	decodeJSON(t, ferry(t, srv, args...).must(t, 0).stdout, &real)
	if len(real.Deleted) != 0 {
		t.Errorf("a second prune deleted %v", real.Deleted)
	}
	ferry(t, srv, "prune", "--from", url).must(t, 2)
}

// TestCLIPruneDuringUpload prunes, with the default grace, while a
// bandwidth-limited push uploads the next step: the push still commits and
// restores, and the kept step too.
func TestCLIPruneDuringUpload(t *testing.T) {
	srv := s3test.Shared(t)
	url := "s3://" + srv.NewBucket(t) + "/run"
	src := t.TempDir()
	writeFile(t, filepath.Join(src, "frozen.pt"), randomBytes(6*mib, 1))
	for step := 1; step <= 3; step++ {
		writeFile(t, filepath.Join(src, "weights.pt"), randomBytes(6*mib, byte(10+step)))
		ferry(t, srv, "push", "--to", url, "--step", fmt.Sprint(step), "--part-size", "5MiB", src).must(t, 0)
	}
	writeFile(t, filepath.Join(src, "weights.pt"), randomBytes(12*mib, 20))
	writeFile(t, filepath.Join(src, "new.pt"), randomBytes(6*mib, 21))
	state := t.TempDir()
	_, wait := startFerry(t, srv, "push", "--to", url, "--step", "4", "--part-size", "5MiB", "--bandwidth", "3MiB/s", "--state-dir", state, src)
	waitFor(t, "the push to upload", 60*time.Second, func() bool { _, id := recordedUpload(t, state); return id != "" })
	time.Sleep(time.Second) // new.pt (a single PUT) is written by now
	var p pruneSummary
	decodeJSON(t, ferry(t, srv, "prune", "--from", url, "--keep-last", "1", "--json").must(t, 0).stdout, &p)
	if !slices.Equal(p.Kept, []int64{3}) {
		t.Fatalf("prune ran after the push committed (kept %v): the machine is too slow for this test", p.Kept)
	}
	if !slices.Equal(p.Pruned, []int64{2, 1}) || len(p.Objects) != 0 {
		t.Fatalf("prune during the upload: pruned %v, deleted objects %v", p.Pruned, p.Objects)
	}
	wait().must(t, 0)
	dst := t.TempDir()
	ferry(t, srv, "restore", "--from", url, "--to", dst).must(t, 0)
	sameTree(t, src, dst)
	ferry(t, srv, "restore", "--from", url, "--to", t.TempDir(), "--step", "3").must(t, 0)
}

// TestCLIMultiNodeRequestBudget counts what the cross-node commit costs on
// top of the data uploads, per node and step (the step has a committed
// predecessor, so dedup reads it): a node that does not complete the set
// makes 5 requests (one LIST that says the step is not committed and which
// step precedes it, GET of its own part (absent), GET of the previous
// manifest, part PUT, one LIST of the parts); the node that completes it 3
// more plus one GET per node (claim PUT, part GETs, manifest PUT, done
// marker PUT).
func TestCLIMultiNodeRequestBudget(t *testing.T) {
	srv := s3test.Shared(t)
	view, px := srv.WithProxy(t, s3proxy.Config{})
	url := "s3://" + view.NewBucket(t) + "/run"
	const nodes = 3
	for _, step := range []int64{1, 2} {
		dirs := rankDirs(t, nodes, 1, 1000, step)
		for k := range nodes {
			px.Reset()
			ferry(t, view, "push", "--to", url, "--step", fmt.Sprint(step), "--nodes", fmt.Sprint(nodes), "--node-rank", fmt.Sprint(k), "--state-dir", t.TempDir(), dirs[k]).must(t, 0)
			b := tally(t, px.Requests(), manifest.DataPrefix("run"))
			t.Logf("step %d node %d: %v", step, k, b)
			if step == 1 {
				continue
			}
			want := 5
			if k == nodes-1 {
				want += 3 + nodes
			}
			within(t, fmt.Sprintf("node %d: requests besides data uploads", k), b.otherTotal(), want)
			within(t, fmt.Sprintf("node %d: LIST requests", k), b.other[s3proxy.OpListObjectsV2], 2)
		}
	}
}

// TestCLIMultiNodeRestartedRun: a 3-node job dies after nodes 0 and 1
// pushed step 5; restarted from an earlier step (a new run, as SLURM's
// restart count makes it), it saves step 5 again with other bytes. Node 2
// pushing first must not complete the set with the dead run's parts.
func TestCLIMultiNodeRestartedRun(t *testing.T) {
	srv := s3test.Shared(t)
	url := "s3://" + srv.NewBucket(t) + "/run"
	push := func(run string, k int, dir string) pushSummary {
		var ps pushSummary
		decodeJSON(t, ferry(t, srv, "push", "--to", url, "--step", "5", "--nodes", "3", "--node-rank", fmt.Sprint(k), "--run-id", run,
			"--json", "--state-dir", t.TempDir(), dir).must(t, 0).stdout, &ps)
		return ps
	}
	old := rankDirs(t, 3, 1, 1000, 5)
	push("4242.0", 0, old[0])
	push("4242.0", 1, old[1])
	fresh := rankDirs(t, 3, 1, 1000, 6) // other bytes, same names below
	for k := range 3 {
		if err := os.Rename(filepath.Join(fresh[k], fmt.Sprintf("ep0-ba6-rank%d.pt", k)), filepath.Join(fresh[k], fmt.Sprintf("ep0-ba5-rank%d.pt", k))); err != nil {
			t.Fatal(err)
		}
	}
	if ps := push("4242.1", 2, fresh[2]); !ps.Pending || ps.WaitingFor == nil || *ps.WaitingFor != 0 {
		t.Fatalf("node 2 of the new run: %+v (merged with the dead run's parts?)", ps)
	}
	push("4242.1", 0, fresh[0])
	if ps := push("4242.1", 1, fresh[1]); !ps.Committed {
		t.Fatalf("last node of the new run: %+v", ps)
	}
	dst := t.TempDir()
	ferry(t, srv, "restore", "--from", url, "--to", dst).must(t, 0)
	for k := range 3 {
		sameTree(t, fresh[k], dst)
	}
}

// TestCLIMultiNodeFinishTogether releases the part PUTs of 32 `ferry push`
// processes at the same moment and holds their listings until all parts
// landed (barriers in the proxy), so that every node sees the set complete,
// then releases their 32 create-only claim PUTs at once: the herd of a
// large job finishing a step together. The proxy applies R2's rules,
// among them its limit of one write a second per key, so one claim is
// answered 200 and the 31 others 429; the manifest PUT is answered 429
// once too. One node merges, the others find the claim taken (a 429 on a
// create-only PUT is resolved by a HEAD, not by waiting for a write slot
// of its own) and wait for its marker. GETs in all stay within 2N + 8
// (before the merge claim, every node that saw the set complete read all
// N parts). The committed manifest is the merge of the 32 parts and
// restores every node's files.
func TestCLIMultiNodeFinishTogether(t *testing.T) {
	const nodes = 32
	srv := s3test.Shared(t)
	view, px := srv.WithProxy(t, s3proxy.Config{R2Rules: true})
	bucket := view.NewBucket(t)
	url := "s3://" + bucket + "/run"
	set := manifest.PartSet{Step: 7, Nodes: nodes}
	claimKey, manifestKey := manifest.ClaimKey("run", set), manifest.ManifestKey("run", set.Step)
	// Every node's part PUT waits for all others; then every node's LIST of
	// the parts (its second LIST) waits for all others, so that each lists
	// after every part landed: the worst case for the merge. Their claim
	// PUTs wait for each other too.
	if err := px.SetRules(
		s3proxy.Rule{Ops: []string{s3proxy.OpPutObject}, KeyPrefix: manifest.StepPartsPrefix("run", set) + "node-",
			Times: nodes, Action: s3proxy.Barrier(nodes, 2*time.Minute)},
		s3proxy.Rule{Ops: []string{s3proxy.OpListObjectsV2}, After: nodes, Times: nodes, Action: s3proxy.Barrier(nodes, 2*time.Minute)},
		s3proxy.Rule{Ops: []string{s3proxy.OpPutObject}, KeyPrefix: claimKey, Times: nodes, Action: s3proxy.Barrier(nodes, 2*time.Minute)},
		s3proxy.Rule{Ops: []string{s3proxy.OpPutObject}, KeyPrefix: manifestKey, Times: 1, Action: s3proxy.TooManyRequests()},
	); err != nil {
		t.Fatal(err)
	}
	dirs := rankDirs(t, nodes, 1, 100, 7)
	start := time.Now()
	waits := make([]func() result, nodes)
	for k := range nodes {
		_, waits[k] = startFerry(t, view, "push", "--to", url, "--step", "7", "--nodes", fmt.Sprint(nodes), "--node-rank", fmt.Sprint(k),
			"--json", "--state-dir", t.TempDir(), dirs[k])
	}
	committed, byPeer := 0, 0
	for k := range nodes {
		var ps pushSummary
		decodeJSON(t, waits[k]().must(t, 0).stdout, &ps)
		if ps.Committed {
			committed++
		}
		if ps.CommittedByPeer {
			byPeer++
		}
	}
	elapsed := time.Since(start)
	if committed != 1 || byPeer != nodes-1 {
		t.Fatalf("%d nodes wrote the manifest and %d saw a peer commit it; want 1 and %d", committed, byPeer, nodes-1)
	}
	var gets, partGets int
	claims, manifestPuts := map[int]int{}, map[int]int{}
	for _, r := range px.Requests() {
		switch {
		case r.Op == s3proxy.OpGetObject:
			gets++
			// Reads of parts that are there: the merge (each node's
			// check for its own part before uploading finds none).
			if _, _, ok := manifest.ParsePartKey("run", r.Key); ok && r.Status == http.StatusOK {
				partGets++
			}
		case r.Op == s3proxy.OpPutObject && r.Key == claimKey:
			claims[r.Status]++
		case r.Op == s3proxy.OpPutObject && r.Key == manifestKey:
			manifestPuts[r.Status]++
		}
	}
	_, throttled := px.Throttled()
	t.Logf("%d nodes in %v; requests: %v; GETs %d, of parts found %d; claim PUTs answered %v, manifest PUTs %v; %d writes answered 429 by the R2 rules",
		nodes, elapsed.Round(time.Millisecond), px.Counts(), gets, partGets, claims, manifestPuts, throttled)
	if gets > 2*nodes+8 || partGets > nodes+nodes/4 {
		t.Fatalf("%d GETs (%d of parts) for %d nodes; want at most %d (%d)", gets, partGets, nodes, 2*nodes+8, nodes+nodes/4)
	}
	// Released together, one claim is let through and the others meet
	// R2's write rate; a node retries its claim only if it found no
	// claim there after the 429, and then gets 412 or 429 again.
	other := 0
	for status, n := range claims {
		if status != http.StatusOK && status != http.StatusTooManyRequests && status != http.StatusPreconditionFailed {
			other += n
		}
	}
	if claims[http.StatusOK] != 1 || claims[http.StatusTooManyRequests] < nodes-1 || other != 0 {
		t.Errorf("claim PUTs answered %v; want one 200, at least %d 429s, any others 412", claims, nodes-1)
	}
	// A loser that retried its claim until a write slot let it through
	// to learn 412 (R2 lets one a second through) would make this about
	// 7N claim PUTs and a minute for 32 nodes.
	if n := claims[http.StatusOK] + claims[http.StatusTooManyRequests] + claims[http.StatusPreconditionFailed]; n > 2*nodes {
		t.Errorf("%d claim PUTs for %d nodes (%v); want at most %d", n, nodes, claims, 2*nodes)
	}
	if manifestPuts[http.StatusTooManyRequests] != 1 || manifestPuts[http.StatusOK] != 1 {
		t.Errorf("manifest PUTs answered %v; want the 429 retried into one 200", manifestPuts)
	}
	if v := px.Violations(); len(v) != 0 {
		t.Errorf("the R2 rules refused %d requests: %v", len(v), v)
	}

	// Exactly one manifest, the merge of every node's part, restoring
	// every node's files.
	var rows []stepSummary
	decodeJSON(t, ferry(t, srv, "list", "--from", url, "--json").must(t, 0).stdout, &rows)
	if len(rows) != 1 || rows[0].Files != nodes+1 {
		t.Fatalf("list: %+v, want step 7 with %d files", rows, nodes+1)
	}
	st := srv.Store(t, bucket)
	parts := make([]*manifest.Part, nodes)
	for k := range nodes {
		p, err := remote.GetPart(context.Background(), st, "run", set, k)
		if err != nil {
			t.Fatal(err)
		}
		parts[k] = p
	}
	want, err := manifest.MergeParts(parts)
	if err != nil {
		t.Fatal(err)
	}
	wantBytes, _ := manifest.Encode(want)
	if got := ferry(t, srv, "show", "--from", url, "--step", "7").must(t, 0).stdout; got != string(wantBytes) {
		t.Fatalf("committed manifest differs from the merge of its parts:\n%s\nwant\n%s", got, wantBytes)
	}
	dst := t.TempDir()
	ferry(t, srv, "restore", "--from", url, "--to", dst).must(t, 0)
	for k := range nodes {
		sameTree(t, dirs[k], dst)
	}
}
