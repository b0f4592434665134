package agent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/agent/control"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/internal/trainsim"
)

// A flush while the agent is still starting (its listing of the bucket
// blocked: the server is down) does not answer "nothing to flush": it
// waits, and says the agent is starting if its time runs out. Once the
// bucket answers, the same flush sees the step committed.
func TestFlushWaitsForTheAgentToStart(t *testing.T) {
	release := make(chan struct{})
	var once sync.Once
	h := startAgent(t, func(o *Options) {
		o.Detect.ExpectedRanks = 1
		o.Store = &store.Faulty{Inner: o.Store, Before: func(op, _ string) error {
			if op == "List" {
				<-release
			}
			return nil
		}}
	})
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	sim := trainsim.Options{Dir: h.watch, Ranks: 1, FileSize: 1 << 20, Seed: 3}
	if err := trainsim.WriteStep(context.Background(), sim, 1); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	if _, err := h.agent.Flush(ctx); !errors.Is(err, control.ErrStarting) {
		t.Fatalf("flush while the agent starts: %v, want ErrStarting", err)
	}
	once.Do(func() { close(release) })
	if left := h.flush(60 * time.Second); len(left) != 0 {
		t.Fatalf("not committed: %v", left)
	}
	if got := h.committedSteps(); len(got) != 1 || got[0] != 1 {
		t.Fatalf("committed %v, want [1]", got)
	}
}

// Flush tells the truth about steps on disk: a step the trainer declared
// written that can never complete (HF save_only_model on 2 ranks with
// --expected-ranks 2: one RNG state ever) fails it, naming the step and
// why; a save killed halfway (a Composer rank whose link still names the
// previous batch) does not, since the bucket's last complete step is what
// the trainer resumes from; a step whose marker is older than its files
// does; an unrecognised tree fails it too.
func TestFlushTellsTheTruth(t *testing.T) {
	write := func(dir, rel, content string) {
		t.Helper()
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	flush := func(h *harness) ([]int64, error) {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		return h.agent.Flush(ctx)
	}
	hf := startAgent(t, func(o *Options) { o.Detect.Layout, o.Detect.ExpectedRanks = "hf", 2 })
	write(hf.watch, "checkpoint-100/model.safetensors", "weights")
	write(hf.watch, "checkpoint-100/trainer_state.json", `{"global_step": 100}`)
	if left, err := flush(hf); err == nil || !strings.Contains(err.Error(), "step 100 waits: files of 0 of 2 expected ranks") || len(left) != 1 {
		t.Fatalf("flush with a declared step that cannot complete: %v %v", left, err)
	}
	comp := startAgent(t, func(o *Options) { o.Detect.Layout = "composer" })
	write(comp.watch, "ep0-ba10-rank0.pt", "rank 0 batch 10")
	write(comp.watch, "ep0-ba10-rank1.pt", "rank 1 batch 10")
	for _, r := range []string{"0", "1"} {
		if err := os.Symlink("ep0-ba10-rank"+r+".pt", filepath.Join(comp.watch, "latest-rank"+r+".pt")); err != nil {
			t.Fatal(err)
		}
	}
	if left, err := flush(comp); err != nil || len(left) != 0 {
		t.Fatalf("flush after batch 10: %v %v", left, err)
	}
	write(comp.watch, "ep0-ba20-rank0.pt", "rank 0 batch 20, killed before its link")
	if left, err := flush(comp); err != nil || len(left) != 0 {
		t.Fatalf("flush after a save killed halfway: %v %v, want nil (batch 10 is what the trainer resumes from)", left, err)
	}
	// Issue 46 item 7: a quiet step above the last committed one whose
	// marker is older than a file it vouches for (a framework writing
	// after its marker in an order ferry does not know, or a re-save
	// killed halfway) fails the flush, naming the step, why and what to do.
	dcp := startAgent(t, func(o *Options) { o.Detect.Layout, o.Detect.Settle = "dcp", 300*time.Millisecond })
	write(dcp.watch, "step-200/__0_0.distcp", "shard 0")
	write(dcp.watch, "step-200/.metadata", "not a pickle: the freshness rule decides")
	write(dcp.watch, "step-200/__1_0.distcp", "shard 1, written after the marker")
	old := time.Now().Add(-time.Minute)
	for i, f := range []string{"__0_0.distcp", ".metadata", "__1_0.distcp"} {
		when := old.Add(time.Duration(i) * time.Second)
		if err := os.Chtimes(filepath.Join(dcp.watch, "step-200", f), when, when); err != nil {
			t.Fatal(err)
		}
	}
	if left, err := flush(dcp); err == nil || len(left) != 1 || left[0] != 200 ||
		!strings.Contains(err.Error(), "step 200 waits: marker: ") || !strings.Contains(err.Error(), "saved again after its marker") ||
		!strings.Contains(err.Error(), "save it again or remove it") {
		t.Fatalf("flush with a stale marker: %v %v", left, err)
	}
	auto := startAgent(t, func(o *Options) { o.Detect.Layout = "auto" })
	write(auto.watch, "run7/weights.npz", "a tree no layout takes")
	if _, err := flush(auto); err == nil || !strings.Contains(err.Error(), "no checkpoint layout recognised") {
		t.Fatalf("flush on an unrecognised tree: %v", err)
	}
}

// A flush that runs out of time names what it still waits for: here a DCP
// step without its .metadata, within an hour's settle window.
func TestFlushTimeoutSaysWhy(t *testing.T) {
	h := startAgent(t, func(o *Options) { o.Detect.Layout, o.Detect.Settle = "dcp", time.Hour })
	<-h.agent.watching
	if err := os.MkdirAll(filepath.Join(h.watch, "step-3"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(h.watch, "step-3", "__0_0.distcp"), []byte("shard"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	_, err := h.agent.Flush(ctx)
	var w *control.WaitingError
	if !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &w) || !strings.Contains(w.For, "step 3 on disk waiting") {
		t.Fatalf("flush timed out with %v, want it to name step 3 waiting on disk", err)
	}
	t.Logf("flush: %v", err)
}
