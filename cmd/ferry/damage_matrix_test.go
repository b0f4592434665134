package main

import (
	"fmt"
	"strings"
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
// For every case:
//   - every restore exits 0, and no node ever holds a partial step at a
//     final path: each holds exactly its selection of one step, every
//     byte the pushed one, and no temp file;
//   - the damage is found in the first round: every node's --json names
//     step 600, the file (or the manifest) and the reason in skipped,
//     except, with --ranks, a node that reads no byte of a shard whose
//     byte flipped, which may place step 600 if it finishes before the
//     finder records the damage (the race crosscheck.go narrows but
//     cannot close: only the node that reads a byte can see it flipped);
//   - after the restart every node holds step 500 and nothing newer (a
//     step-600 folder the race left is set aside), every node skipped
//     step 600 for its record without reading it: a damaged step is read
//     by at most one restore per node, and placed by none after the
//     first round.
//
// A deleted manifest leaves step 600 uncommitted: every node restores
// step 500 in the first round, as for a push that never committed.
func TestDamageMatrix(t *testing.T) {
	srv := s3test.Shared(t)
	tmpl := pushMatrixRun(t, srv)
	var tally matrixTally
	for _, dc := range damageCases() {
		t.Run(dc.name(), func(t *testing.T) {
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
					t.Run(job.name(), func(t *testing.T) {
						job.play(t, srv, "s3://"+bucket+"/run", &tally)
					})
				}
			}
		})
	}
	t.Logf("%d cases (%d damaged steps x 3 node counts x whole/--ranks), %d restores, each exit 0; per damaged step: "+
		"found damaged by reading it by at most %d restores (%d in all), the others skipped it for its record; "+
		"placed (a failed restore) by at most %d restores of the first round (%d in all, of %d restores that could not see the flipped byte), "+
		"by none of the restart; read by %d restores of the restart",
		tally.cases, len(damageCases()), tally.restores, tally.maxFound, tally.found, tally.maxPlaced, tally.placed, tally.blind, tally.rereads)
}

// matrixJob is one case: a damaged step restored by a job of some nodes.
type matrixJob struct {
	dc    damageCase
	key   string // the damaged object
	nodes int
	ranks bool
	run   matrixRun
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

// play restores with every node at once, twice, and checks each round.
func (j matrixJob) play(t *testing.T, srv *s3test.Server, url string, tally *matrixTally) {
	dirs := make([]string, j.nodes)
	specs := make([]string, j.nodes)
	for n := range dirs {
		dirs[n], specs[n] = t.TempDir(), j.rankSpec(n)
	}
	first := restoreRound(t, srv, url, dirs, specs)
	found, placed := 0, 0
	for n, o := range first {
		if !j.reads(n) && j.dc.kind == flippedByte {
			tally.blind++
		}
		j.checkHolds(t, n, dirs[n], o.sum.Step)
		switch {
		case j.dc.kind == deletedManifest:
			if o.sum.Step != 500 || len(o.sum.Skipped) != 0 {
				t.Errorf("node %d: step %d, skipped %+v; want step 500: step 600 is not committed", n, o.sum.Step, o.sum.Skipped)
			}
		case o.sum.Step == 600:
			placed++
			if j.reads(n) || j.dc.kind != flippedByte {
				t.Errorf("node %d placed damaged step 600 (%s) although it can see the damage\n%s", n, j.dc.name(), o.stderr)
			}
		default:
			if j.checkSkipped(t, n, o) {
				found++
			}
		}
	}
	if j.dc.kind != deletedManifest && found == 0 {
		t.Errorf("no node read step 600 and found it damaged")
	}
	second := restoreRound(t, srv, url, dirs, specs)
	for n, o := range second {
		j.checkHolds(t, n, dirs[n], 500)
		if o.sum.Step != 500 {
			t.Errorf("node %d restored step %d after the restart, want 500", n, o.sum.Step)
		}
		if j.dc.kind == deletedManifest {
			continue
		}
		if len(o.sum.Skipped) != 1 || o.sum.Skipped[0].Record != "recorded before" {
			tally.rereads++
			t.Errorf("node %d after the restart: skipped %+v; want step 600 skipped for its record, unread", n, o.sum.Skipped)
		}
	}
	tally.cases++
	tally.restores += len(first) + len(second)
	tally.found += found
	tally.placed += placed
	tally.maxFound = max(tally.maxFound, found)
	tally.maxPlaced = max(tally.maxPlaced, placed)
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
	if s.Record != "recorded before" && !strings.Contains(s.Reason, j.dc.reason(j.reads(n))) && !strings.Contains(s.Reason, "while this restore read it") {
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
	cases, restores, found, placed, maxFound, maxPlaced, rereads int
	// blind counts the restores that did not read a file whose byte flipped.
	blind int
}
