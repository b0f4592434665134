package agent

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"math/rand"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferrylabs/ferry/agent/detect"
	"github.com/ferrylabs/ferry/internal/s3test"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/manifest"
)

// TestSaveScheduleFuzz drives the agent, at its defaults, with seeded
// schedules of trainer behaviour (savefuzz_gen_test.go: ranks at different
// speeds, markers before and after other ranks, temporary folders renamed
// into place, saves killed halfway, re-saves of committed steps, cleanup
// deleting files of older steps, steps deleted soon after their save,
// files rewritten in place) against versitygw, and checks it against an
// oracle that recorded every state the trainer completed:
//
//   - every manifest the agent wrote (revisions included, seen as they
//     were written) holds a state the trainer completed for that step;
//   - every step whose last completed state is still on disk at the end
//     is committed with exactly that state;
//   - a completed step deleted before it was durable is reported lost;
//   - flush answers that everything is committed, and that is true.
//
// FERRY_FUZZ_SEEDS sets how many schedules run (default 10; `make
// test-writers` runs 200, `make fuzz-agent SEEDS=N` any number),
// FERRY_FUZZ_FIRST the first seed, FERRY_FUZZ_PARALLEL how many at once,
// FERRY_FUZZ_LAYOUT some layouts alone, comma-separated (seed N then runs
// the N-th of those, not the rotation's).
// A failing seed prints its schedule; add it as a writer-pattern row.
func TestSaveScheduleFuzz(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the agent against versitygw")
	}
	seeds, first, parallel := envInt("FERRY_FUZZ_SEEDS", 10), envInt("FERRY_FUZZ_FIRST", 1), envInt("FERRY_FUZZ_PARALLEL", 6)
	srv := s3test.Shared(t)
	layouts := fuzzLayouts()
	if only := os.Getenv("FERRY_FUZZ_LAYOUT"); only != "" {
		layouts = slices.DeleteFunc(layouts, func(l fuzzLayout) bool { return !slices.Contains(strings.Split(only, ","), l.name) })
		if len(layouts) == 0 {
			t.Fatalf("FERRY_FUZZ_LAYOUT=%s: no such fuzzer layout", only)
		}
	}
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	var mu sync.Mutex
	ran := map[string]int{}
	for seed := first; seed < first+seeds; seed++ {
		l := layouts[seed%len(layouts)]
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			t.Run(fmt.Sprintf("seed-%d-%s", seed, l.name), func(t *testing.T) {
				runSchedule(t, srv, int64(seed), l)
			})
			mu.Lock()
			ran[l.name]++
			mu.Unlock()
		})
	}
	wg.Wait()
	t.Logf("schedules run per layout: %v", ran)
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// recordingStore keeps every manifest written through it, as written.
type recordingStore struct {
	store.Store
	prefix string
	mu     sync.Mutex
	seen   []*manifest.Manifest
	bad    []string
}

func (r *recordingStore) Put(ctx context.Context, key string, body io.ReadSeeker, size int64, opts store.PutOptions) (store.ObjectInfo, error) {
	if _, ok := manifest.StepFromManifestKey(r.prefix, key); !ok {
		return r.Store.Put(ctx, key, body, size, opts)
	}
	data, err := io.ReadAll(body)
	if err != nil {
		return store.ObjectInfo{}, err
	}
	info, err := r.Store.Put(ctx, key, bytes.NewReader(data), size, opts)
	if err == nil {
		m, derr := manifest.Decode(bytes.NewReader(data), r.prefix)
		r.mu.Lock()
		if derr != nil || len(m.Shards) > 0 {
			r.bad = append(r.bad, fmt.Sprintf("manifest %s: decode %v, %d shards", key, derr, len(m.Shards)))
		} else {
			r.seen = append(r.seen, m)
		}
		r.mu.Unlock()
	}
	return info, err
}

// runSchedule runs one seed's schedule and checks the oracle.
func runSchedule(t *testing.T, srv *s3test.Server, seed int64, l fuzzLayout) {
	f := newFz(seed, t.TempDir())
	if msg := runAgainstAgent(t, srv, f, l, func() { f.play(l) }); msg != "" {
		t.Errorf("seed %d (%s): %s\nschedule:\n%s", seed, l.name, msg, strings.Join(f.history, "\n"))
		if d := os.Getenv("FERRY_FUZZ_DUMP"); d != "" {
			_ = os.CopyFS(filepath.Join(d, fmt.Sprintf("seed-%d", seed)), os.DirFS(f.dir))
		}
	}
}

func newFz(seed int64, dir string) *fz {
	return &fz{rng: rand.New(rand.NewSource(seed)), dir: dir, complete: map[string][]fileState{},
		deleted: map[string]bool{}, gone: map[string]bool{}}
}

// runAgainstAgent starts the agent, at the CLI's defaults and the
// layout's options, on f's folder, runs play (the trainer), flushes, stops
// the agent and returns what the oracle found wrong ("" for nothing).
func runAgainstAgent(t *testing.T, srv *s3test.Server, f *fz, l fuzzLayout, play func()) string {
	return runAgainstNodes(t, srv, f, l, []string{f.dir}, func(_ int, o *detect.Options) {
		if l.options != nil {
			l.options(o)
		}
	}, play)
}

// play runs the schedule: saves (some killed halfway, some re-saving an
// earlier step), pauses, cleanups and quick deletions. It records in
// f.deleted the steps it deleted whole after the trainer completed them,
// in f.gone the others it deleted or cut.
func (f *fz) play(l fuzzLayout) {
	var onDisk []int64
	next := int64(100)
	for range 2 + f.rng.Intn(4) {
		n := next
		if len(onDisk) > 0 && f.rng.Intn(5) == 0 {
			n = onDisk[f.rng.Intn(len(onDisk))]
			f.note("rollback: save step %d again", n)
		} else {
			next += 100
			f.note("save step %d", n)
		}
		f.ops, f.dead, f.crashAt = 0, false, -1
		if f.rng.Intn(4) == 0 {
			f.crashAt = 1 + f.rng.Intn(8)
		}
		l.save(f, n)
		f.dead = false
		if l.onDisk(f, n) && !containsStep(onDisk, n) {
			onDisk = append(onDisk, n)
		}
		// Steps the save itself removed (Composer's rotation) are gone.
		onDisk = slices.DeleteFunc(onDisk, func(s int64) bool { return !l.onDisk(f, s) })
		// The next save comes after training steps, or after a restart:
		// never within the clock tick of this save's marker, where
		// modification times cannot order two writes (docs/agent.md).
		time.Sleep(minSaveGap + f.gap())
		switch f.rng.Intn(8) {
		case 0:
			if len(onDisk) > 1 || l.name == "single" {
				f.note("cleanup of an older step")
				f.cleanup(l, onDisk[0])
				// A whole step deleted (flat, Composer) is no longer
				// one a rolled-back run saves again.
				onDisk = slices.DeleteFunc(onDisk, func(s int64) bool { return !l.onDisk(f, s) })
			}
		case 1:
			if l.name != "single" && len(onDisk) > 0 {
				victim := onDisk[len(onDisk)-1]
				f.note("delete step %d soon after its save", victim)
				time.Sleep(time.Duration(400+f.rng.Intn(1100)) * time.Millisecond)
				f.removeWhole(l, victim)
				onDisk = onDisk[:len(onDisk)-1]
			}
		}
	}
}

// cleanup runs the layout's cleanup of an older step n.
func (f *fz) cleanup(l fuzzLayout, n int64) {
	if l.name != "single" {
		f.cut(l, n, func() { l.cleanup(f, n) })
		return
	}
	l.cleanup(f, n)
	if f.exists("checkpoint.pth.tar") {
		f.completed("single", "")
	}
}

// removeWhole deletes step n whole: only a step whose last completed state
// is what is deleted was complete when it went.
func (f *fz) removeWhole(l fuzzLayout, n int64) {
	key := l.stepKey(n)
	states := f.complete[key]
	if len(states) > 0 && maps.Equal(l.state(f, n), states[len(states)-1]) && !holdsTemp(states[len(states)-1]) {
		f.deleted[key] = true
	} else {
		f.gone[key] = true
	}
	l.remove(f, n)
}

// cut runs del, which deletes part or all of step n: a step deleted whole
// from its last completed state was complete when it went; one cut, or
// deleted from another state, is gone (it may stay uncommitted, but no
// state of it the trainer did not complete may be committed).
func (f *fz) cut(l fuzzLayout, n int64, del func()) {
	key := l.stepKey(n)
	states := f.complete[key]
	whole := len(states) > 0 && maps.Equal(l.state(f, n), states[len(states)-1]) && !holdsTemp(states[len(states)-1])
	del()
	if whole && len(l.state(f, n)) == 0 {
		f.deleted[key] = true
	} else if !maps.Equal(l.state(f, n), lastOf(states)) {
		f.gone[key] = true
	}
}

// holdsTemp reports whether a state holds a file under a temporary name
// (a killed writer's, left beside the files of a later save): docs/agent.md
// says such a step waits, with a warning, until the name is gone.
func holdsTemp(s fileState) bool {
	for p := range s {
		if detect.IsTempName(path.Base(p)) {
			return true
		}
	}
	return false
}

func lastOf(s []fileState) fileState {
	if len(s) == 0 {
		return nil
	}
	return s[len(s)-1]
}

// minSaveGap is the least time between the end of a save and the next.
const minSaveGap = 50 * time.Millisecond

func containsStep(s []int64, n int64) bool {
	for _, x := range s {
		if x == n {
			return true
		}
	}
	return false
}

// lostCount reads ferry_steps_lost_total: counted flat steps reported lost
// have no number to show in status.
func lostCount(t *testing.T, reg *prometheus.Registry) int {
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "ferry_steps_lost_total" && len(mf.GetMetric()) > 0 {
			return int(mf.GetMetric()[0].GetCounter().GetValue())
		}
	}
	return 0
}
