package agent

import (
	"maps"
	"math/rand"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/agent/detect"
	"github.com/ferrylabs/ferry/internal/savetrace"
)

// The trace replay: save orders read from the frameworks' source
// (testdata/saveorders/*.trace, FORMAT.md there) played through the
// fuzzer's trainer, so that kills, torn files and the oracle work as for
// the hand-written layouts. savetrace_play_test.go plays one save,
// savetrace_replay_test.go runs the schedules.

// traceDirs are where traces are found: the frameworks' own, and this
// harness's development samples (named "sample-..." in schedules).
var traceDirs = []struct{ dir, prefix string }{
	{"../testdata/saveorders", ""},
	{"testdata/savetrace", "sample-"},
}

// loadTraces parses every trace, keeping those FERRY_TRACE names
// (comma-separated, by schedule name) when it is set; FERRY_TRACE_DIRS
// adds folders (comma-separated), as written by someone writing traces.
func loadTraces(t *testing.T) []*savetrace.Trace {
	var out []*savetrace.Trace
	dirs := traceDirs
	for _, d := range strings.Split(os.Getenv("FERRY_TRACE_DIRS"), ",") {
		if d != "" {
			dirs = append(dirs, struct{ dir, prefix string }{d, ""})
		}
	}
	for _, d := range dirs {
		trs, err := savetrace.Glob(d.dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, tr := range trs {
			tr.Name = d.prefix + tr.Name
			out = append(out, tr)
		}
	}
	if only := os.Getenv("FERRY_TRACE"); only != "" {
		names := strings.Split(only, ",")
		out = slices.DeleteFunc(out, func(tr *savetrace.Trace) bool { return !slices.Contains(names, tr.Name) })
		if len(out) == 0 {
			t.Fatalf("FERRY_TRACE=%s: no such trace (samples are named sample-<file>)", only)
		}
	}
	return out
}

// traceOptions sets the agent's options as `ferry agent --layout L FLAGS`
// would (cmd/ferry cmd_agent.go detectOptions), for the flags traces use.
func traceOptions(tr *savetrace.Trace, o *detect.Options) {
	o.Layout = tr.Layout
	for _, fl := range tr.Flags {
		switch fl.Name {
		case "step-pattern":
			o.StepPattern = fl.Value
		case "expected-ranks":
			o.ExpectedRanks, _ = strconv.Atoi(fl.Value) // checked by the parser
		case "no-marker":
			o.NoMarker = fl.Value != "false"
		case "settle":
			o.Settle, _ = time.ParseDuration(fl.Value)
		}
	}
}

// tracePointers are the pointers a layout rebuilds per step in its
// manifests, not the trainer's files of the step.
var tracePointers = map[string]map[string]bool{
	"deepspeed": {"latest": true},
	"megatron":  {"latest_checkpointed_iteration.txt": true},
}

// traceRun is one schedule's trace: what its saves need between them.
type traceRun struct {
	tr *savetrace.Trace
	// gap bounds the pause before each operation (drawn in [0, gap]).
	gap time.Duration
	// begun are the steps whose save began, oldest first ({prevN}).
	begun []int64
	// clockStep, when not 0, steps the clock in the save of clockSave:
	// from an operation drawn at random on, files get mtimes shifted by it.
	clockStep time.Duration
	clockSave int64
	// tops are the first components of the paths the trace names with
	// {step}: the root entries that make up a step (its folder, NeMo's
	// -last copy, Composer's per-rank files).
	tops []string
	// fails are the operations the replay could not run (a trace that
	// does not fit the disk it plays on: a rename onto a folder there).
	fails []string
	// dirs are the nodes' watch dirs (none or one: a single node, f.dir).
	dirs []string
}

func newTraceRun(tr *savetrace.Trace, gap time.Duration) *traceRun {
	r := &traceRun{tr: tr, gap: gap}
	for _, op := range tr.Ops {
		for i, a := range op.Args {
			top, _, _ := strings.Cut(a, "/")
			if strings.Contains(top, "{step") && !(op.Kind == savetrace.Text && i == 1) && !(op.Kind == savetrace.Symlink && i == 0) &&
				!slices.Contains(r.tops, top) {
				r.tops = append(r.tops, top)
			}
		}
	}
	return r
}

// layout is the trace as a fuzzLayout: the fuzzer's oracle reads steps
// through it.
func (r *traceRun) layout() fuzzLayout {
	tr := r.tr
	l := fuzzLayout{
		name:      tr.Name,
		save:      r.save,
		options:   func(o *detect.Options) { traceOptions(tr, o) },
		generated: tracePointers[tr.Layout],
		single:    tr.Layout == "single",
	}
	l.files = r.stepFiles
	if tr.Step == "." {
		l.dir = func(int64) string { return "" }
		if l.single {
			l.files = nil
		}
		return l
	}
	l.dir = func(n int64) string { s, _ := savetrace.Expand(tr.Step, savetrace.Vars{Step: n}); return s }
	return l
}

// stepFiles is step n's files: those below the root entries the trace
// names with the step's number (its folder, NeMo's -last copy beside it,
// Composer's per-rank files in the root), as the agent counts them.
func (r *traceRun) stepFiles(f *fz, n int64) fileState {
	var res []*regexp.Regexp
	for _, top := range r.tops {
		res = append(res, templateRE(top, n))
	}
	out := fileState{}
	dirs := r.dirs
	if len(dirs) == 0 {
		dirs = []string{f.dir}
	}
	for _, dir := range dirs {
		node := &fz{dir: dir}
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			for _, re := range res {
				if re.MatchString(e.Name()) {
					maps.Copy(out, node.snapshot(e.Name()))
					break
				}
			}
		}
	}
	return out
}

// templateRE matches the names a template gives step n, any rank.
func templateRE(tmpl string, n int64) *regexp.Regexp {
	var re strings.Builder
	re.WriteString("^")
	last := 0
	for _, m := range placeholder.FindAllStringSubmatchIndex(tmpl, -1) {
		re.WriteString(regexp.QuoteMeta(tmpl[last:m[0]]))
		if name := tmpl[m[2]:m[3]]; name == "step" || name == "epoch" {
			s, _ := savetrace.Expand(tmpl[m[0]:m[1]], savetrace.Vars{Step: n})
			re.WriteString(s)
		} else {
			re.WriteString("[0-9]+")
		}
		last = m[1]
	}
	re.WriteString(regexp.QuoteMeta(tmpl[last:]) + "$")
	return regexp.MustCompile(re.String())
}

var placeholder = regexp.MustCompile(`\{([a-z]+[0-9]*)(?::[0-9]+d?)?\}`)

// vars are the placeholders' values for a save of step n.
func (r *traceRun) vars(n int64) savetrace.Vars {
	v := savetrace.Vars{Step: n, World: r.tr.Ranks}
	for i := len(r.begun) - 1; i >= 0; i-- {
		if r.begun[i] != n {
			v.Prev = append(v.Prev, r.begun[i])
		}
	}
	return v
}

// traceStep is one operation of a save, placeholders substituted.
type traceStep struct {
	op    savetrace.Op
	actor string
	args  []string
	size  int64
	// chunks, for a create, are the sizes of the appends that follow it.
	chunks []int64
}

func (s traceStep) sync() bool {
	return s.op.Kind == savetrace.Barrier || s.op.Kind == savetrace.Complete || s.op.Kind == savetrace.RaiseIfExists
}

// maxTraceSize caps a write: the agent's rules do not depend on sizes,
// and hashing every state of every step must stay cheap.
const maxTraceSize = 96 << 10

// expand orders a save's operations: between two barriers (complete is
// one too) the actors' operations interleaved at random, each actor's in
// its order; operations naming a step that does not exist are dropped.
func expand(tr *savetrace.Trace, v savetrace.Vars, rng *rand.Rand) []traceStep {
	var out []traceStep
	segment := map[string][]traceStep{}
	var actors []string
	flush := func() {
		for len(actors) > 0 {
			i := rng.Intn(len(actors))
			a := actors[i]
			out = append(out, segment[a][0])
			if segment[a] = segment[a][1:]; len(segment[a]) == 0 {
				actors = slices.Delete(actors, i, i+1)
			}
		}
	}
	for _, op := range tr.Ops {
		if op.Who.All {
			flush()
			out = append(out, traceStep{op: op, actor: "all"})
			continue
		}
		ranks := []int{op.Who.Rank}
		if op.Who.Each {
			ranks = nil
			for r := range tr.Ranks {
				ranks = append(ranks, r)
			}
		}
		for _, rank := range ranks {
			v.Rank = rank
			s, ok := expandOp(op, v)
			if !ok {
				continue
			}
			s.actor = op.Who.Actor(rank)
			if len(segment[s.actor]) == 0 {
				actors = append(actors, s.actor)
			}
			segment[s.actor] = append(segment[s.actor], s)
		}
	}
	flush()
	return sizeCreates(out)
}

func expandOp(op savetrace.Op, v savetrace.Vars) (traceStep, bool) {
	s := traceStep{op: op, size: min(op.Size, maxTraceSize)}
	for _, a := range op.Args {
		e, ok := savetrace.Expand(a, v)
		if !ok {
			return s, false
		}
		s.args = append(s.args, e)
	}
	return s, true
}

// sizeCreates gives each create the sizes of its appends.
func sizeCreates(seq []traceStep) []traceStep {
	open := map[string]int{}
	for i, s := range seq {
		if s.op.Kind != savetrace.Create && s.op.Kind != savetrace.Append {
			continue
		}
		key := s.actor + " " + s.args[0]
		if s.op.Kind == savetrace.Create {
			open[key] = i
		} else if c, ok := open[key]; ok {
			seq[c].chunks = append(seq[c].chunks, s.size)
		}
	}
	return seq
}

// fileOps counts the operations of seq a job can die at.
func fileOps(seq []traceStep) int {
	n := 0
	for _, s := range seq {
		if !s.sync() {
			n++
		}
	}
	return n
}

// TestTraceSharedFolder: a save whose rank renames a folder the other
// ranks wrote into is not spread over nodes; one renaming its own files
// (DCP's .metadata.tmp) is.
func TestTraceSharedFolder(t *testing.T) {
	head := "trace: 1\nframework: x\nversions: x\nsource: a/b@v1\nlayout: dcp\nranks: 2\nstep: step{step}\ncite a.py f\n"
	for body, want := range map[string]string{
		"r* write step{step}-tmp/__{rank}_0.distcp 1\nall barrier\nr0 rename step{step}-tmp step{step}\nall complete\n":                                         "step{step}-tmp",
		"r* write step{step}/__{rank}_0.distcp 1\nr0 write step{step}/.metadata.tmp 1\nr0 rename step{step}/.metadata.tmp step{step}/.metadata\nall complete\n": "",
		"r1 write step{step}-tmp/a 1\nr1 rename step{step}-tmp step{step}\nall complete\n":                                                                      "",
	} {
		tr, err := savetrace.Parse("t.trace", []byte(head+body))
		if err != nil {
			t.Fatal(err)
		}
		if got := sharedFolder(tr); got != want {
			t.Errorf("%q: shared folder %q, want %q", body, got, want)
		}
	}
}
