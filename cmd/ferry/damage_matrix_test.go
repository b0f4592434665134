package main

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/ferrylabs/ferry/internal/s3test"
	"github.com/ferrylabs/ferry/manifest"
)

// The target of issue 48, item 1: damage injected in any file of the
// latest step (a flipped byte, a truncated object, a deleted object, a
// deleted or corrupt manifest), on 1, 2 and 4 nodes, each node restoring
// the whole step or its own ranks (--ranks), all at once with the flags
// the docs give job entrypoints (--allow-empty --on-damaged previous
// --set-aside-newer). Then every node restores again: the job's restart.
// On more than one node every restore knows its node and the job's start
// (the restore barrier, restore/barrier.go): with --ranks from --nodes,
// --node-rank and --run-id; whole, from an srun step's environment
// (SLURM_STEP_NUM_NODES, SLURM_NODEID, SLURM_JOB_ID, SLURM_RESTART_COUNT),
// since --nodes without --ranks would select the node's files. For every
// case:
//   - every restore exits 0, and no node ever holds a partial step at a
//     final path: each holds exactly its selection of one step, every
//     byte the pushed one, and no temp file;
//   - the damage is found in the first round: every node's --json names
//     step 600, the file (or the manifest) and the reason in skipped;
//   - after the first round every node holds the same step, 500: no node
//     places step 600, not even one that reads no byte of a shard whose
//     byte flipped (without the barrier such a node placed it when it
//     finished before the finder recorded the damage); each says, in
//     --json's barrier, that every node checked in for the step placed;
//   - after the restart every node holds step 500 and nothing newer, every
//     node skipped step 600 for its record without reading it: a damaged
//     step is read by at most one restore per node, and placed by none.
//
// A deleted manifest leaves step 600 uncommitted: every node restores
// step 500 in both rounds, and warns that objects of step 600 exist
// without a manifest (--json's newer_data_step).
func TestDamageMatrix(t *testing.T) {
	srv := s3test.Shared(t)
	tmpl := pushMatrixRun(t, srv)
	var tally matrixTally
	// The damaged steps in parallel (each in a bucket of its own): most
	// of a round is the barrier's first pause, 0.2 s, on the nodes that
	// finish before the last one.
	t.Run("cases", func(t *testing.T) {
		for ci, dc := range damageCases() {
			t.Run(dc.name(), func(t *testing.T) {
				t.Parallel()
				bucket := cloneBucket(t, srv, tmpl.bucket)
				st := srv.Store(t, bucket)
				key := dc.inject(t, st, tmpl.latest)
				for _, nodes := range []int{1, 2, 4} {
					for _, ranks := range []bool{false, true} {
						// Each job starts from the damaged bucket with no record.
						if err := st.Delete(t.Context(), manifest.DamagedKey("run", 600)); err != nil {
							t.Fatal(err)
						}
						job := matrixJob{dc: dc, key: key, nodes: nodes, ranks: ranks, run: tmpl}
						job.id = fmt.Sprintf("c%d-%s", ci, job.name())
						t.Run(job.name(), func(t *testing.T) {
							var one matrixTally
							job.play(t, srv, "s3://"+bucket+"/run", &one)
							tally.add(&one)
						})
					}
				}
			})
		}
	})
	t.Logf("%d cases (%d damaged steps x 3 node counts x whole/--ranks), %d restores, each exit 0; per damaged step: "+
		"found damaged by reading it by at most %d restores (%d in all), the others skipped it for its record; "+
		"placed (a failed restore) by %d restores (%d restores could not see the flipped byte); read by %d restores of the restart; "+
		"steps placed, first round %v, restart %v; the barrier waited at most %.2fs at a step, %d times at step 600 before its record",
		tally.cases, len(damageCases()), tally.restores, tally.maxFound, tally.found, tally.placed, tally.blind, tally.rereads,
		tally.steps[0], tally.steps[1], tally.maxWait, tally.damagedAtBarrier)
}

// matrixJob is one case: a damaged step restored by a job of some nodes.
type matrixJob struct {
	dc    damageCase
	key   string // the damaged object
	nodes int
	ranks bool
	run   matrixRun
	id    string // the job's ID: the run is id.<round>
}

func (j matrixJob) name() string {
	sel := "whole"
	if j.ranks {
		sel = "ranks"
	}
	return fmt.Sprintf("%dnodes-%s", j.nodes, sel)
}

// rankSpec is node n's --ranks, "" for the whole step.
func (j matrixJob) rankSpec(n int) string {
	if !j.ranks {
		return ""
	}
	per := matrixRanks / j.nodes
	if per == 1 {
		return fmt.Sprint(n)
	}
	return fmt.Sprintf("%d-%d", n*per, (n+1)*per-1)
}

// reads reports whether node n reads the damaged file's bytes.
func (j matrixJob) reads(n int) bool {
	r, ok := shardRank(j.dc.path)
	return !j.ranks || !ok || selects(j.rankSpec(n), r)
}

// nodeArgs are node n's restore arguments and environment in a round
// (0: the first, 1: the restart, a new start of the job).
func (j matrixJob) nodeArgs(n, round int) (args, env []string) {
	if j.ranks {
		args = []string{"--ranks", j.rankSpec(n)}
	}
	switch {
	case j.nodes == 1:
	case j.ranks:
		args = append(args, "--nodes", fmt.Sprint(j.nodes), "--node-rank", fmt.Sprint(n), "--run-id", fmt.Sprintf("%s.%d", j.id, round))
	default:
		env = []string{"SLURM_JOB_ID=" + j.id, fmt.Sprintf("SLURM_RESTART_COUNT=%d", round),
			fmt.Sprintf("SLURM_STEP_NUM_NODES=%d", j.nodes), fmt.Sprintf("SLURM_NODEID=%d", n)}
	}
	return args, env
}

// round restores with every node at once.
func (j matrixJob) round(t *testing.T, srv *s3test.Server, url string, dirs []string, round int) []nodeOutcome {
	t.Helper()
	args, envs := make([][]string, j.nodes), make([][]string, j.nodes)
	for n := range dirs {
		args[n], envs[n] = j.nodeArgs(n, round)
	}
	return restoreRound(t, srv, url, dirs, args, envs)
}

// play restores with every node at once, twice, and checks each round.
func (j matrixJob) play(t *testing.T, srv *s3test.Server, url string, tally *matrixTally) {
	dirs := make([]string, j.nodes)
	for n := range dirs {
		dirs[n] = t.TempDir()
	}
	first := j.round(t, srv, url, dirs, 0)
	found, placed := 0, 0
	for n, o := range first {
		if !j.reads(n) && j.dc.kind == flippedByte {
			tally.blind++
		}
		j.checkHolds(t, n, dirs[n], o.sum.Step)
		j.checkBarrier(t, n, o, 0, tally)
		switch {
		case j.dc.kind == deletedManifest:
			j.checkNewerData(t, n, o)
		case o.sum.Step == 600:
			placed++
			t.Errorf("node %d placed damaged step 600 (%s)\n%s", n, j.dc.name(), o.stderr)
		default:
			if j.checkSkipped(t, n, o) {
				found++
			}
		}
		if o.sum.Step != 500 {
			t.Errorf("node %d restored step %d in the first round, want 500 on every node", n, o.sum.Step)
		}
	}
	if j.dc.kind != deletedManifest && found == 0 {
		t.Errorf("no node read step 600 and found it damaged")
	}
	second := j.round(t, srv, url, dirs, 1)
	for n, o := range second {
		j.checkHolds(t, n, dirs[n], 500)
		j.checkBarrier(t, n, o, 1, tally)
		if o.sum.Step != 500 {
			t.Errorf("node %d restored step %d after the restart, want 500", n, o.sum.Step)
		}
		if j.dc.kind == deletedManifest {
			j.checkNewerData(t, n, o)
			continue
		}
		if len(o.sum.Skipped) != 1 || o.sum.Skipped[0].Record != "recorded before" {
			tally.rereads++
			t.Errorf("node %d after the restart: skipped %+v; want step 600 skipped for its record, unread", n, o.sum.Skipped)
		}
	}
	for r, round := range [][]nodeOutcome{first, second} {
		for _, o := range round {
			tally.count(r, o.sum.Step)
		}
	}
	tally.cases++
	tally.restores += len(first) + len(second)
	tally.found += found
	tally.placed += placed
	tally.maxFound = max(tally.maxFound, found)
}

// checkBarrier checks what node n's --json says of the barrier: on more
// than one node, that every node of this start of the job checked in for
// the step placed (the last the barrier waited at).
func (j matrixJob) checkBarrier(t *testing.T, n int, o nodeOutcome, round int, tally *matrixTally) {
	t.Helper()
	b := o.sum.Barrier
	if j.nodes == 1 {
		if b != nil {
			t.Errorf("node %d of 1: barrier %+v; want none", n, b)
		}
		return
	}
	run := fmt.Sprintf("%s.%d", j.id, round)
	if b == nil || b.Off != "" || b.Run != run || b.Nodes != j.nodes || b.Node != n || len(b.Steps) == 0 {
		t.Errorf("node %d: barrier %+v; want run %s, node %d of %d, on", n, b, run, n, j.nodes)
		return
	}
	last := b.Steps[len(b.Steps)-1]
	if last.Step != o.sum.Step || last.Outcome != "all checked in" || len(last.Missing) != 0 {
		t.Errorf("node %d placed step %d; barrier %+v: want every node checked in for it", n, o.sum.Step, b.Steps)
	}
	for _, s := range b.Steps {
		tally.maxWait = max(tally.maxWait, s.Seconds)
		if s.Outcome == "damaged" {
			tally.damagedAtBarrier++
		}
	}
}

// checkNewerData checks that node n warned that objects of step 600 exist
// without a manifest.
func (j matrixJob) checkNewerData(t *testing.T, n int, o nodeOutcome) {
	t.Helper()
	if o.sum.Step != 500 || len(o.sum.Skipped) != 0 || o.sum.NewerDataStep != 600 ||
		!strings.Contains(o.stderr, "objects of step 600 exist without a manifest") {
		t.Errorf("node %d: step %d, skipped %+v, newer data step %d; want step 500, step 600 uncommitted and its objects warned about\n%s",
			n, o.sum.Step, o.sum.Skipped, o.sum.NewerDataStep, o.stderr)
	}
}

// checkSkipped checks that node n's first restore says step 600 was
// skipped, naming the file and the reason, and reports whether it read
// the step (rather than skipping it for a record already there).
func (j matrixJob) checkSkipped(t *testing.T, n int, o nodeOutcome) bool {
	t.Helper()
	if o.sum.Step != 500 || len(o.sum.Skipped) != 1 {
		t.Errorf("node %d: step %d, skipped %+v; want step 500 and step 600 skipped\n%s", n, o.sum.Step, o.sum.Skipped, o.stderr)
		return false
	}
	// The reason is this node's finding, or the record's: the finding of
	// a node that read the file, or of one that checked its size.
	s := o.sum.Skipped[0]
	if s.Step != 600 || s.Path != j.dc.path || s.Key != j.key ||
		!strings.Contains(s.Reason, j.dc.reason(true)) && !strings.Contains(s.Reason, j.dc.reason(false)) {
		t.Errorf("node %d: skipped %+v; want step 600, path %q, key %s, a reason saying %q or %q",
			n, s, j.dc.path, j.key, j.dc.reason(true), j.dc.reason(false))
	}
	if s.Record != "recorded before" && !strings.Contains(s.Reason, j.dc.reason(j.reads(n))) &&
		!strings.Contains(s.Reason, "while this restore read it") && !strings.Contains(s.Reason, "while this restore waited for the other nodes") {
		t.Errorf("node %d found the damage itself, but its reason %q does not say %q", n, s.Reason, j.dc.reason(j.reads(n)))
	}
	switch s.Record {
	case "recorded", "already recorded":
		return true
	case "recorded before":
		return false
	}
	t.Errorf("node %d: record %q", n, s.Record)
	return false
}

// checkHolds checks that node n holds exactly its selection of step,
// with the pushed bytes, and no folder of a newer step.
func (j matrixJob) checkHolds(t *testing.T, n int, dir string, step int64) {
	t.Helper()
	want := map[string][]byte{}
	for path, data := range j.run.good[step] {
		if r, ok := shardRank(path); !ok || selects(j.rankSpec(n), r) {
			want[path] = data
		}
	}
	if err := holdsExactly(dir, want); err != nil {
		t.Errorf("node %d, after restoring step %d: %v", n, step, err)
	}
	if newer, err := newerSteps(dir, step); err != nil || len(newer) > 0 {
		t.Errorf("node %d, after restoring step %d: folders of newer steps %+v (%v): the trainer would resume from them", n, step, newer, err)
	}
}

// matrixTally counts what the matrix did, for its log line.
type matrixTally struct {
	cases, restores, found, placed, maxFound, rereads int
	// blind counts the restores that did not read a file whose byte flipped.
	blind int
	// steps counts the steps placed, by round: step -> restores.
	steps [2]map[int64]int
	// maxWait is the longest a barrier waited at one step, in seconds;
	// damagedAtBarrier counts the restores that saw step 600 recorded
	// damaged while they waited at its barrier.
	maxWait          float64
	damagedAtBarrier int
	mu               sync.Mutex
}

// add adds one job's tally, from any goroutine.
func (m *matrixTally) add(o *matrixTally) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.cases += o.cases
	m.restores += o.restores
	m.found += o.found
	m.placed += o.placed
	m.maxFound = max(m.maxFound, o.maxFound)
	m.rereads += o.rereads
	m.blind += o.blind
	for r, steps := range o.steps {
		for step, n := range steps {
			for range n {
				m.count(r, step)
			}
		}
	}
	m.maxWait = max(m.maxWait, o.maxWait)
	m.damagedAtBarrier += o.damagedAtBarrier
}

func (m *matrixTally) count(round int, step int64) {
	if m.steps[round] == nil {
		m.steps[round] = map[int64]int{}
	}
	m.steps[round][step]++
}
