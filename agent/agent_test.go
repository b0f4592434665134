package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/agent/control"
	"github.com/ferrylabs/ferry/agent/detect"
	"github.com/ferrylabs/ferry/internal/ratelimit"
	"github.com/ferrylabs/ferry/internal/remote"
	"github.com/ferrylabs/ferry/internal/s3store"
	"github.com/ferrylabs/ferry/internal/s3test"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/internal/trainsim"
	"github.com/ferrylabs/ferry/restore"
	"github.com/ferrylabs/ferry/uploader"
)

func TestMain(m *testing.M) { s3test.Main(m) }

// harness runs an agent in-process against the shared real S3 server.
type harness struct {
	t        *testing.T
	counters *s3store.Counters
	st       store.Store
	prefix   string
	watch    string
	state    string
	agent    *Agent
	cancel   context.CancelFunc
	done     chan error
}

func startAgent(t *testing.T, mod func(*Options)) *harness {
	t.Helper()
	srv := s3test.Shared(t)
	bucket := srv.NewBucket(t)
	counters := &s3store.Counters{}
	h := &harness{t: t, counters: counters, prefix: "run", watch: t.TempDir(), state: t.TempDir(),
		st: srv.StoreWith(t, s3store.Config{Bucket: bucket, OnRequest: counters.Count})}
	h.start(mod)
	return h
}

func (h *harness) start(mod func(*Options)) {
	h.t.Helper()
	opts := Options{
		Store: h.st, Prefix: h.prefix, URL: "s3://test/" + h.prefix,
		Detect:   detect.Options{Dir: h.watch, Layout: "composer", Settle: 300 * time.Millisecond, Debounce: 50 * time.Millisecond},
		Upload:   uploader.Options{PartSize: store.MinPartSize, Concurrency: 4},
		StateDir: h.state,
		Requests: h.counters.Snapshot,
		RetryMin: 100 * time.Millisecond,
		RetryMax: time.Second,
	}
	if mod != nil {
		mod(&opts)
	}
	a, err := New(opts)
	if err != nil {
		h.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.agent, h.cancel, h.done = a, cancel, make(chan error, 1)
	go func() { h.done <- a.Run(ctx) }()
	h.t.Cleanup(h.stop)
}

// stop cancels the agent and waits for its drain to end.
func (h *harness) stop() {
	if h.cancel == nil {
		return
	}
	h.cancel()
	h.cancel = nil
	select {
	case err := <-h.done:
		if err != nil {
			h.t.Errorf("agent Run: %v", err)
		}
	case <-time.After(60 * time.Second):
		h.t.Error("agent did not stop within 60s")
	}
}

func (h *harness) flush(d time.Duration) []int64 {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	left, _ := h.agent.Flush(ctx)
	return left
}

func (h *harness) committedSteps() []int64 {
	h.t.Helper()
	steps, err := remote.Steps(context.Background(), h.st, h.prefix, 0)
	if err != nil {
		h.t.Fatal(err)
	}
	sort.Slice(steps, func(i, j int) bool { return steps[i] < steps[j] })
	return steps
}

func TestAgentUploadsSlowTrainer(t *testing.T) {
	sim := trainsim.Options{Ranks: 2, FileSize: 6<<20 + 123, Chunk: 512 << 10, Pause: 20 * time.Millisecond, Seed: 3}
	h := startAgent(t, func(o *Options) { o.Detect.ExpectedRanks = 2 })
	checkSlowTrainer(t, h, sim)
}

// The same with parts sent while the trainer writes (--pipeline): files of
// several 8 MiB parts written over about a second. Parts go before the
// files are complete, and nothing is re-sent for an append-only writer.
func TestAgentUploadsSlowTrainerPipelined(t *testing.T) {
	sim := trainsim.Options{Ranks: 2, FileSize: 40<<20 + 123, Chunk: 1 << 20, Pause: 25 * time.Millisecond, Seed: 3}
	h := startAgent(t, func(o *Options) {
		o.Detect.ExpectedRanks = 2
		o.Pipeline, o.Upload.PartSize = true, 8<<20
	})
	checkSlowTrainer(t, h, sim)
	st := h.agent.Status()
	if st.BytesSentEarly < 8<<20 {
		t.Errorf("%d bytes sent while steps were written, want at least one part", st.BytesSentEarly)
	}
	for _, s := range st.Steps {
		if s.PartsResent != 0 {
			t.Errorf("step %d: %d parts re-sent for an append-only writer", s.Step, s.PartsResent)
		}
	}
	if ups, err := h.st.ListUploads(context.Background(), h.prefix+"/"); err != nil || len(ups) != 0 {
		t.Errorf("multipart uploads left: %+v, %v", ups, err)
	}
}

// checkSlowTrainer writes three steps with sim and checks that each is
// committed, restores to the trainer's bytes, and that no manifest was
// ever visible before its objects.
func checkSlowTrainer(t *testing.T, h *harness, sim trainsim.Options) {
	sim.Dir = h.watch
	// A watcher of the bucket: a manifest must never be visible before
	// every object it names is complete.
	ctx, stopCheck := context.WithCancel(context.Background())
	var violation error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			if err := remote.CheckObjects(ctx, h.st, h.prefix); err != nil && ctx.Err() == nil && violation == nil {
				violation = err
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	steps := []int64{100, 200, 300}
	for _, s := range steps {
		if err := trainsim.WriteStep(context.Background(), sim, s); err != nil {
			t.Fatal(err)
		}
	}
	if left := h.flush(90 * time.Second); len(left) != 0 {
		t.Fatalf("steps not committed after flush: %v (status %+v)", left, h.agent.Status())
	}
	stopCheck()
	wg.Wait()
	if violation != nil {
		t.Fatalf("a manifest was visible before its objects: %v", violation)
	}
	if got := h.committedSteps(); fmt.Sprint(got) != fmt.Sprint(steps) {
		t.Fatalf("committed steps %v, want %v", got, steps)
	}
	for _, s := range steps {
		dst := t.TempDir()
		res, err := restore.Restore(context.Background(), restore.Options{Store: h.st, Prefix: h.prefix, Dir: dst, Step: s})
		if err != nil {
			t.Fatalf("restore step %d: %v", s, err)
		}
		if res.Step != s {
			t.Fatalf("restored step %d, want %d", res.Step, s)
		}
		for r := 0; r < 2; r++ {
			got, err := os.ReadFile(filepath.Join(dst, trainsim.FileName(0, s, r)))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, trainsim.Content(3, s, r, sim.FileSize)) {
				t.Errorf("step %d rank %d: restored bytes differ from what the trainer wrote", s, r)
			}
			link, err := os.Readlink(filepath.Join(dst, trainsim.LatestName(r)))
			if err != nil || link != trainsim.FileName(0, s, r) {
				t.Errorf("step %d: %s -> %q (%v), want the step's own file", s, trainsim.LatestName(r), link, err)
			}
		}
	}
	st := h.agent.Status()
	if st.LastCommitted != 300 || len(st.Steps) != 3 {
		t.Errorf("status: last committed %d, %d steps", st.LastCommitted, len(st.Steps))
	}
	for _, s := range st.Steps {
		if s.State != control.StateCommitted || s.Committed.IsZero() {
			t.Errorf("status of step %d: %+v", s.Step, s)
		}
	}
}

func copyLayout(t *testing.T, name, dst string) {
	t.Helper()
	src := filepath.Join("..", "testdata", "layouts", name)
	copied := time.Now().Add(-time.Minute)
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		out := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(out, 0o755)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if err := os.WriteFile(out, data, 0o644); err != nil {
			return err
		}
		// One time for every file, as a save that finished a while ago
		// leaves them: the copy's own order (path order) is not the
		// trainer's, and a marker counts only if no file is newer.
		return os.Chtimes(out, copied, copied)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestAgentLayouts(t *testing.T) {
	cases := []struct {
		tree, layout, pattern string
		want                  []int64
		pointer               string // a generated pointer file the restore must contain
	}{
		{tree: "composer", layout: "auto", want: []int64{100, 200}},
		{tree: "composer-sharded", layout: "composer", want: []int64{300}},
		{tree: "dcp", layout: "auto", want: []int64{100}},
		{tree: "deepspeed", layout: "auto", want: []int64{100, 200}, pointer: "latest"},
		{tree: "megatron", layout: "auto", want: []int64{100}, pointer: "latest_checkpointed_iteration.txt"},
		{tree: "hf", layout: "auto", want: []int64{500, 1000}},
		{tree: "flat", layout: "flat", pattern: `^model-(\d+)\.pt$`, want: []int64{100, 200}},
	}
	for _, c := range cases {
		t.Run(c.tree, func(t *testing.T) {
			watch := t.TempDir()
			copyLayout(t, c.tree, watch)
			h := startAgent(t, func(o *Options) {
				o.Detect.Dir = watch
				o.Detect.Layout = c.layout
				o.Detect.StepPattern = c.pattern
			})
			if left := h.flush(60 * time.Second); len(left) != 0 {
				t.Fatalf("not committed: %v", left)
			}
			if got := h.committedSteps(); fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Fatalf("committed steps %v, want %v", got, c.want)
			}
			// The manifest records the layout the agent detected.
			wantLayout := strings.TrimSuffix(c.tree, "-sharded")
			m, err := remote.Get(context.Background(), h.st, h.prefix, c.want[0])
			if err != nil {
				t.Fatal(err)
			}
			if m.Layout != wantLayout {
				t.Fatalf("manifest of step %d: layout %q, want %q", c.want[0], m.Layout, wantLayout)
			}
			if c.pointer != "" {
				last := c.want[len(c.want)-1]
				dst := t.TempDir()
				if _, err := restore.Restore(context.Background(), restore.Options{Store: h.st, Prefix: h.prefix, Dir: dst, Step: c.want[0]}); err != nil {
					t.Fatal(err)
				}
				data, err := os.ReadFile(filepath.Join(dst, c.pointer))
				if err != nil {
					t.Fatalf("restored step lacks its pointer file: %v", err)
				}
				if bytes.Contains(data, []byte(fmt.Sprint(last))) && last != c.want[0] {
					t.Errorf("pointer of step %d names the later step: %q", c.want[0], data)
				}
			}
		})
	}
}

func TestAgentKeepLocal(t *testing.T) {
	h := startAgent(t, func(o *Options) { o.KeepLocal = 1; o.Detect.ExpectedRanks = 1 })
	sim := trainsim.Options{Dir: h.watch, Ranks: 1, FileSize: 1 << 20, Seed: 1}
	for _, s := range []int64{1, 2, 3} {
		if err := trainsim.WriteStep(context.Background(), sim, s); err != nil {
			t.Fatal(err)
		}
		if left := h.flush(60 * time.Second); len(left) != 0 {
			t.Fatalf("not committed: %v", left)
		}
	}
	// An unfinished step on disk (never complete: still being written
	// when we look) must never be deleted.
	partial := filepath.Join(h.watch, trainsim.FileName(0, 4, 0))
	if err := os.WriteFile(partial, []byte("half"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Retention runs after the journal entry, which is all flush waits
	// for: give it a moment.
	for _, s := range []int64{1, 2} {
		var err error
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if _, err = os.Stat(filepath.Join(h.watch, trainsim.FileName(0, s, 0))); errors.Is(err, os.ErrNotExist) {
				break
			}
		}
		if !errors.Is(err, os.ErrNotExist) {
			t.Errorf("step %d still on disk with --keep-local 1 (stat: %v)", s, err)
		}
	}
	if _, err := os.Stat(filepath.Join(h.watch, trainsim.FileName(0, 3, 0))); err != nil {
		t.Errorf("newest committed step deleted: %v", err)
	}
	h.stop()
	if _, err := os.Stat(partial); err != nil {
		t.Errorf("an uncommitted file was deleted: %v", err)
	}
	// Every committed step is still restorable from the bucket.
	for _, s := range []int64{1, 2, 3} {
		if _, err := restore.Restore(context.Background(), restore.Options{Store: h.st, Prefix: h.prefix, Dir: t.TempDir(), Step: s}); err != nil {
			t.Errorf("restore step %d: %v", s, err)
		}
	}
}

func TestAgentNeverDeletesWithoutKeepLocal(t *testing.T) {
	h := startAgent(t, nil)
	sim := trainsim.Options{Dir: h.watch, Ranks: 2, FileSize: 1000, Seed: 1}
	for _, s := range []int64{1, 2, 3} {
		if err := trainsim.WriteStep(context.Background(), sim, s); err != nil {
			t.Fatal(err)
		}
	}
	if left := h.flush(60 * time.Second); len(left) != 0 {
		t.Fatalf("not committed: %v", left)
	}
	h.stop()
	for _, s := range []int64{1, 2, 3} {
		for r := 0; r < 2; r++ {
			got, err := os.ReadFile(filepath.Join(h.watch, trainsim.FileName(0, s, r)))
			if err != nil || !bytes.Equal(got, trainsim.Content(1, s, r, 1000)) {
				t.Errorf("training file of step %d rank %d changed or missing: %v", s, r, err)
			}
		}
	}
}

func TestAgentStepDeletedMidUpload(t *testing.T) {
	h := startAgent(t, func(o *Options) {
		o.Store = ratelimit.Uploads(o.Store, ratelimit.New(4<<20)) // 4 MiB/s: the 24 MiB step takes ~6 s
		o.Detect.ExpectedRanks = 1
	})
	sim := trainsim.Options{Dir: h.watch, Ranks: 1, FileSize: 24 << 20, Seed: 9}
	if err := trainsim.WriteStep(context.Background(), sim, 50); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the upload to start", 30*time.Second, func() bool {
		st := h.agent.Status()
		return len(st.Steps) == 1 && st.Steps[0].State == control.StateUploading && st.Steps[0].BytesSent > 0
	})
	// The trainer's own retention removes the step before it is durable.
	if err := os.Remove(filepath.Join(h.watch, trainsim.FileName(0, 50, 0))); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(h.watch, trainsim.LatestName(0)))
	waitFor(t, "the step to be abandoned", 30*time.Second, func() bool {
		st := h.agent.Status()
		return len(st.Steps) == 1 && st.Steps[0].State == control.StateAbandoned
	})
	if left := h.flush(10 * time.Second); len(left) != 0 {
		t.Errorf("flush waits for an abandoned step: %v", left)
	}
	h.stop()
	if got := h.committedSteps(); len(got) != 0 {
		t.Fatalf("a deleted step was committed: %v", got)
	}
	ups, err := h.st.ListUploads(context.Background(), h.prefix+"/")
	if err != nil {
		t.Fatal(err)
	}
	if len(ups) != 0 {
		t.Errorf("multipart uploads of the abandoned step were not aborted: %+v", ups)
	}
}

func TestAgentFlushTimesOutListingSteps(t *testing.T) {
	h := startAgent(t, func(o *Options) {
		o.Store = ratelimit.Uploads(o.Store, ratelimit.New(2<<20))
		o.Detect.ExpectedRanks = 1
	})
	sim := trainsim.Options{Dir: h.watch, Ranks: 1, FileSize: 40 << 20, Seed: 2}
	if err := trainsim.WriteStep(context.Background(), sim, 7); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	left, err := h.agent.Flush(ctx)
	if err == nil || fmt.Sprint(left) != "[7]" {
		t.Fatalf("flush with a short timeout: left %v, err %v; want [7] and an error", left, err)
	}
	h.agent.Abort()
}

func TestAgentRestartSkipsCommittedSteps(t *testing.T) {
	h := startAgent(t, func(o *Options) { o.Detect.ExpectedRanks = 1 })
	sim := trainsim.Options{Dir: h.watch, Ranks: 1, FileSize: 2 << 20, Seed: 4}
	for _, s := range []int64{10, 20} {
		if err := trainsim.WriteStep(context.Background(), sim, s); err != nil {
			t.Fatal(err)
		}
	}
	if left := h.flush(60 * time.Second); len(left) != 0 {
		t.Fatalf("not committed: %v", left)
	}
	h.stop()
	// A second agent over the same state dir: nothing to upload again.
	h.start(func(o *Options) { o.Detect.ExpectedRanks = 1 })
	if err := trainsim.WriteStep(context.Background(), sim, 30); err != nil {
		t.Fatal(err)
	}
	if left := h.flush(60 * time.Second); len(left) != 0 {
		t.Fatalf("not committed: %v", left)
	}
	st := h.agent.Status()
	if len(st.Steps) != 1 || st.Steps[0].Step != 30 {
		t.Fatalf("restarted agent handled %+v, want only step 30", st.Steps)
	}
	if got := h.committedSteps(); fmt.Sprint(got) != "[10 20 30]" {
		t.Fatalf("committed %v", got)
	}
}

// waitFor polls cond every 20ms until it holds or d passes.
func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The request budget of a committed step on one node (issue: count what a
// checkpoint costs): per file one PUT or create + P parts + complete, plus
// at most 5 other requests; and an idle agent makes no request at all.
func TestAgentRequestBudgetAndIdle(t *testing.T) {
	h := startAgent(t, func(o *Options) {
		o.Detect.ExpectedRanks = 2
		o.Detect.Rescan = 200 * time.Millisecond // rescans must cost no requests either
		o.Pipeline = true                        // as the CLI runs it
	})
	// Per rank: one 12 MiB file (3 parts of 5 MiB) at steps 1 and 2.
	sim := trainsim.Options{Dir: h.watch, Ranks: 2, FileSize: 12 << 20, Seed: 8}
	for _, s := range []int64{1, 2} {
		if err := trainsim.WriteStep(context.Background(), sim, s); err != nil {
			t.Fatal(err)
		}
		if left := h.flush(60 * time.Second); len(left) != 0 {
			t.Fatalf("not committed: %v", left)
		}
	}
	for _, s := range h.agent.Status().Steps {
		r := s.Requests
		data := r["CreateMultipartUpload"] + r["UploadPart"] + r["CompleteMultipartUpload"] + r["PutObject"]
		var total int64
		for _, c := range r {
			total += c
		}
		t.Logf("step %d requests: %v", s.Step, r)
		// 2 files x (create + 3 parts + complete), then the manifest PUT.
		if r["CreateMultipartUpload"] != 2 || r["UploadPart"] != 6 || r["CompleteMultipartUpload"] != 2 {
			t.Errorf("step %d data requests %v, want 2 creates, 6 parts, 2 completes", s.Step, r)
		}
		if other := total - data + 1; other > 5 { // +1: the manifest PUT is counted in PutObject
			t.Errorf("step %d: %d requests beyond the data, budget 5: %v", s.Step, other, r)
		}
	}
	before := h.counters.Total()
	time.Sleep(3 * time.Second) // 15 rescans
	if after := h.counters.Total(); after != before {
		t.Errorf("an idle agent made %d requests in 3 s: %v", after-before, h.counters.Snapshot())
	}
}

// A step the trainer removes before it is complete has the parts sent
// while it was written aborted, and nothing is committed.
func TestAgentPipelineAbortsVanishedStep(t *testing.T) {
	h := startAgent(t, func(o *Options) {
		o.Detect.ExpectedRanks = 2 // rank 1 never comes: the step stays incomplete
		o.Pipeline, o.Upload.PartSize = true, 8<<20
	})
	path := filepath.Join(h.watch, trainsim.FileName(0, 100, 0))
	writeTestFile(t, path, 24<<20, 5)
	waitFor(t, "parts sent while the step is written", 30*time.Second, func() bool {
		return h.agent.Status().BytesSentEarly >= 8<<20
	})
	ctx := context.Background()
	if ups, err := h.st.ListUploads(ctx, h.prefix+"/"); err != nil || len(ups) != 1 {
		t.Fatalf("uploads in flight: %+v, %v; want the early one", ups, err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the early upload aborted", 30*time.Second, func() bool {
		ups, err := h.st.ListUploads(ctx, h.prefix+"/")
		return err == nil && len(ups) == 0
	})
	if got := h.committedSteps(); len(got) != 0 {
		t.Fatalf("committed %v, want nothing", got)
	}
}
