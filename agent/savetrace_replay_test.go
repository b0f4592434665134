package agent

import (
	"cmp"
	"fmt"
	"hash/fnv"
	"maps"
	"math/rand"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/agent/detect"
	"github.com/ferrylabs/ferry/internal/s3test"
	"github.com/ferrylabs/ferry/internal/savetrace"
)

// TestSaveTraceReplay plays every trace (savetrace_test.go) against the
// agent at the CLI's defaults and the trace's --layout and flags, with a
// kill after each operation of a save: the job saves step 100 in full,
// saves step 200 and dies at operation k+1 (k = 0 .. all of them: a write
// there is left cut short, anything else undone; k = all is a save that
// completes), restarts and saves step 200 again ("same") or step 300
// ("next") in full. Each pause before an operation is drawn from [0, gap],
// each between two saves from traceSaveGap + [0, gap].
// The fuzzer's oracle must hold: every version committed is a state the
// trainer completed (its `complete`), every completed save still on disk
// is committed, flush says no more than is true.
//
// Knobs: FERRY_TRACE=a,b (traces by name; samples are sample-<file>),
// FERRY_TRACE_DIRS (more folders of traces), FERRY_TRACE_NODES (default
// 1; 1,2,4 also spreads each trace's ranks over 2 and 4 nodes, each with
// its own watch dir and agent, the same settings, one bucket),
// FERRY_TRACE_GAPS (default 0,2s), FERRY_TRACE_RESTART (same,next),
// FERRY_TRACE_CLOCK (clock steps, e.g. -1h,1h: in the restarted save,
// files written from an operation drawn at random on get mtimes shifted
// by it; default none), FERRY_TRACE_MODE=all (every kill point x gap x
// restart x clock; default: FERRY_TRACE_SAMPLE schedules drawn from them
// with FERRY_TRACE_SEED, 40 and 1 in go test (make test); make
// test-traces, in CI, runs a fixed 300: 300 schedules of 28 traces took
// 4m17s on 2 cores), FERRY_TRACE_PARALLEL (8 in go test, where other
// packages' tests run beside it and each agent takes inotify instances,
// 128 per user by default; make test-traces runs 32 alone: the schedules
// mostly wait),
// FERRY_TRACE_REPORT (a file the counts are written to: make fuzz-traces).
func TestSaveTraceReplay(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the agent against versitygw")
	}
	traces := loadTraces(t)
	if len(traces) == 0 {
		t.Skip("no traces in testdata/saveorders or agent/testdata/savetrace")
	}
	all, points := traceSchedules(t, traces)
	run := all
	if os.Getenv("FERRY_TRACE_MODE") != "all" {
		run = sampleSchedules(withoutOpenFindings(t, all), envInt("FERRY_TRACE_SAMPLE", 40), int64(envInt("FERRY_TRACE_SEED", 1)))
	}
	srv := s3test.Shared(t)
	sem := make(chan struct{}, envInt("FERRY_TRACE_PARALLEL", 8))
	var wg sync.WaitGroup
	start := time.Now()
	for _, s := range run {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			t.Run(s.String(), func(t *testing.T) { runTraceSchedule(t, srv, s) })
		})
	}
	wg.Wait()
	summary := fmt.Sprintf("trace replay: %d traces, %d kill points, %d of %d schedules run in %v (failed: %v)",
		len(traces), points, len(run), len(all), time.Since(start).Round(time.Second), t.Failed())
	t.Log(summary)
	if p := os.Getenv("FERRY_TRACE_REPORT"); p != "" {
		if err := os.WriteFile(p, []byte(summary+"\n"), 0o644); err != nil {
			t.Error(err)
		}
	}
}

// traceSchedule is one replay: a trace killed at one point, at one gap.
type traceSchedule struct {
	tr *savetrace.Trace
	// kill is how many operations of the second save run before the job
	// dies; ops is how many it has (kill == ops: it completes).
	kill, ops int
	gap       time.Duration
	next      bool
	clock     time.Duration
	// nodes spreads the ranks over that many nodes (contiguous blocks),
	// each with its own watch dir and agent, one bucket.
	nodes int
}

func (s traceSchedule) String() string {
	restart := "same"
	if s.next {
		restart = "next"
	}
	name := fmt.Sprintf("%s/kill-%d-of-%d/gap-%v/%s", s.tr.Name, s.kill, s.ops, s.gap, restart)
	if s.clock != 0 {
		name += "/clock" + s.clock.String()
	}
	if s.nodes > 1 {
		name += fmt.Sprintf("/nodes-%d", s.nodes)
	}
	return name
}

func (s traceSchedule) seed() int64 {
	h := fnv.New64a()
	h.Write([]byte(s.String()))
	return int64(h.Sum64() >> 1)
}

// traceSchedules returns every schedule of the knobs and the count of
// kill points over the traces.
func traceSchedules(t *testing.T, traces []*savetrace.Trace) ([]traceSchedule, int) {
	gaps := envDurations(t, "FERRY_TRACE_GAPS", "0,2s")
	clocks := append([]time.Duration{0}, envDurations(t, "FERRY_TRACE_CLOCK", "")...)
	var nodes []int
	for _, w := range strings.Split(cmp.Or(os.Getenv("FERRY_TRACE_NODES"), "1"), ",") {
		n, err := strconv.Atoi(w)
		if err != nil || n < 1 {
			t.Fatalf("FERRY_TRACE_NODES: %q is not a count of nodes", w)
		}
		nodes = append(nodes, n)
	}
	restarts := strings.Split(os.Getenv("FERRY_TRACE_RESTART"), ",")
	if os.Getenv("FERRY_TRACE_RESTART") == "" {
		restarts = []string{"same", "next"}
	}
	var out []traceSchedule
	points := 0
	for _, tr := range traces {
		ops := fileOps(expand(tr, savetrace.Vars{Step: 200, Prev: []int64{100}, World: tr.Ranks}, rand.New(rand.NewSource(1))))
		points += ops + 1
		for k := 0; k <= ops; k++ {
			for _, g := range gaps {
				for _, r := range restarts {
					if r != "same" && r != "next" {
						t.Fatalf("FERRY_TRACE_RESTART: %q is neither same nor next", r)
					}
					for _, c := range clocks {
						for _, n := range nodes {
							if n > 1 && (tr.Ranks < n || tr.Layout == "single" || sharedFolder(tr) != "") {
								continue // fewer ranks than nodes, one file, or a shared filesystem
							}
							out = append(out, traceSchedule{tr: tr, kill: k, ops: ops, gap: g, next: r == "next", clock: c, nodes: n})
						}
					}
				}
			}
		}
	}
	return out, points
}

// sampleSchedules draws n schedules (all of them if fewer), the same n
// for the same seed.
func sampleSchedules(all []traceSchedule, n int, seed int64) []traceSchedule {
	if len(all) <= n {
		return all
	}
	out := append([]traceSchedule(nil), all...)
	rand.New(rand.NewSource(seed)).Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out[:n]
}

func envDurations(t *testing.T, name, def string) []time.Duration {
	v, ok := os.LookupEnv(name)
	if !ok {
		v = def
	}
	var out []time.Duration
	for _, w := range strings.Split(v, ",") {
		if w = strings.TrimSpace(w); w == "" {
			continue
		}
		d, err := time.ParseDuration(w)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		out = append(out, d)
	}
	return out
}

// runTraceSchedule runs one schedule and checks the oracle.
func runTraceSchedule(t *testing.T, srv *s3test.Server, s traceSchedule) {
	f := newFz(s.seed(), t.TempDir())
	f.torchSave = s.tr.WrittenByTorchSave
	f.dsWorld = [2]int{s.tr.DeepSpeedDP, s.tr.DeepSpeedMP}
	r := newTraceRun(s.tr, s.gap)
	r.dirs = []string{f.dir}
	for len(r.dirs) < s.nodes {
		r.dirs = append(r.dirs, t.TempDir())
	}
	l := r.layout()
	msg := runAgainstNodes(t, srv, f, l, r.dirs, func(k int, o *detect.Options) {
		traceOptions(s.tr, o)
		if s.nodes > 1 && o.ExpectedRanks > 0 {
			// --expected-ranks counts a node's ranks: the same on every
			// node of a job with as many ranks on each.
			o.ExpectedRanks = max(1, o.ExpectedRanks/s.nodes)
		}
		// As ferry agent does with the same settings on every node
		// (cmd/ferry agent_marker.go): nodes other than 0 of a layout
		// whose marker rank 0 writes detect without it.
		if k > 0 && rankZeroMarker[s.tr.Layout] && !slices.ContainsFunc(s.tr.Flags, func(fl savetrace.Flag) bool { return fl.Name == "no-marker" }) {
			o.NoMarker = true
		}
	}, func() { s.play(f, r, l) })
	if len(r.fails) > 0 {
		msg = strings.TrimSpace(msg + "\nthe trace could not be played: " + strings.Join(r.fails, "; "))
	}
	if msg != "" {
		t.Errorf("%s: %s\nschedule:\n%s", s, msg, strings.Join(f.history, "\n"))
		if d := os.Getenv("FERRY_FUZZ_DUMP"); d != "" {
			_ = os.CopyFS(d+"/"+strings.ReplaceAll(s.String(), "/", "_"), os.DirFS(f.dir))
		}
	}
}

// sharedFolder returns a folder one rank renames after other ranks wrote
// into it ("" if none): such a save needs every rank's files in one
// filesystem (OLMo's <dir>-tmp renamed by rank 0), so the trace is not
// spread over nodes with a watch dir each.
func sharedFolder(tr *savetrace.Trace) string {
	for _, op := range tr.Ops {
		if op.Kind != savetrace.Rename || op.Who.All {
			continue
		}
		for _, w := range tr.Ops {
			if !w.Who.All && (w.Who.Each || w.Who.Rank != op.Who.Rank) && len(w.Args) > 0 &&
				w.Kind != savetrace.Symlink && strings.HasPrefix(w.Args[0], op.Args[0]+"/") {
				return op.Args[0]
			}
		}
	}
	return ""
}

// rankZeroMarker are the layouts whose marker only global rank 0's node
// sees (cmd/ferry agent_marker.go).
var rankZeroMarker = map[string]bool{"dcp": true, "deepspeed": true, "megatron": true, "hf": true, "composer": true}

// traceSaveGap is the least time between two saves of the job: training
// steps, or a restart, come between them. Saves closer than the agent's
// debounce (250 ms) would let a rotation delete a step the agent never
// had a chance to see complete (the fuzzer's quick deletions also wait
// 400 ms or more).
const traceSaveGap = 500 * time.Millisecond

// play is the job: step 100 saved in full, step 200 killed after s.kill
// operations, then the restarted job's save.
func (s traceSchedule) play(f *fz, r *traceRun, l fuzzLayout) {
	f.world = s.tr.Ranks
	saveAt := func(n int64, crashAt int) {
		f.ops, f.dead, f.crashAt = 0, false, crashAt
		l.save(f, n)
		f.dead = false
	}
	pause := func() time.Duration {
		return traceSaveGap + time.Duration(f.rng.Int63n(int64(s.gap)+1))
	}
	f.note("save step 100")
	saveAt(100, -1)
	time.Sleep(pause())
	if s.kill < s.ops {
		f.note("save step 200, the job dies at operation %d of %d", s.kill+1, s.ops)
	} else {
		f.note("save step 200 in full")
	}
	saveAt(200, s.kill+1)
	time.Sleep(pause())
	n := int64(200)
	if s.next {
		n = 300
	}
	f.note("the job restarts: save step %d", n)
	r.clockSave, r.clockStep = n, s.clock
	saveAt(n, -1)
}

// openFindings are the traces whose replay still breaks the oracle (issue
// 46 is open on them): the sample go test and make test-traces draw leaves
// them out, and says so; make fuzz-traces, and FERRY_TRACE naming them,
// play them and fail. Each entry says what fails.
//
// Spread over 2 nodes (FERRY_TRACE_NODES=2, not in the sample), composer,
// composer-sharded and lightning-deepspeed still fail, as before their
// one-node fixes (62 of 132 schedules failed then, 46 now): composer's
// monolithic file is rank 0's alone, so node 1 never has a part and no
// step commits (all 28, as olmo-unsharded); and with the job restarted to
// save the same step (composer-sharded 13, lightning-deepspeed 5), the
// step is merged from one save's share on one node and another save's on
// the other (node 1, without the marker, commits a killed save's share
// once quiet; or a full re-save's revision pairs old and new shares).
// nemo2 on 2 nodes fails 36 of 152 schedules for the same reason: node 1
// sees neither NeMo's markers nor .metadata, and commits its share on the
// settle window (the marker's removal proves a step on one node only).
var openFindings = map[string]string{
	// None on one node (FERRY_TRACE_MODE=all, gaps 0 and 2 s, restarts
	// next and same): the multi-node failures above are not in the sample.
}

// withoutOpenFindings drops the schedules of openFindings' traces unless
// FERRY_TRACE names traces.
func withoutOpenFindings(t *testing.T, all []traceSchedule) []traceSchedule {
	if os.Getenv("FERRY_TRACE") != "" || len(openFindings) == 0 {
		return all
	}
	for _, name := range slices.Sorted(maps.Keys(openFindings)) {
		t.Logf("left out of the sample, an open finding (make fuzz-traces plays it): %s: %s", name, openFindings[name])
	}
	return slices.DeleteFunc(slices.Clone(all), func(s traceSchedule) bool { _, open := openFindings[s.tr.Name]; return open })
}
