package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/agent/detect"
	"github.com/ferrylabs/ferry/internal/remote"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/internal/trainsim"
)

// A flat layout without a step pattern numbers steps by a counter, which
// starts afresh at every start: a restart must recognise an unchanged file
// by its content and never commit it again, and a new file must take the
// next free number.
func TestAgentFlatRestartNeverRecommits(t *testing.T) {
	flat := func(o *Options) { o.Detect.Layout = "flat" }
	h := startAgent(t, flat)
	writeTestFile(t, filepath.Join(h.watch, "model.bin"), 3<<20, 1)
	if left := h.flush(60 * time.Second); len(left) != 0 {
		t.Fatalf("not committed: %v", left)
	}
	if got := h.committedSteps(); fmt.Sprint(got) != "[0]" {
		t.Fatalf("committed %v, want [0]", got)
	}
	for restart := 1; restart <= 2; restart++ {
		h.stop()
		h.start(flat)
		if left := h.flush(60 * time.Second); len(left) != 0 {
			t.Fatalf("restart %d: not committed: %v", restart, left)
		}
		if got := h.committedSteps(); fmt.Sprint(got) != "[0]" {
			t.Fatalf("restart %d: committed %v: an unchanged file was committed again", restart, got)
		}
	}
	writeTestFile(t, filepath.Join(h.watch, "model-2.bin"), 1<<20, 2)
	if left := h.flush(60 * time.Second); len(left) != 0 {
		t.Fatalf("not committed: %v", left)
	}
	if got := h.committedSteps(); fmt.Sprint(got) != "[0 1]" {
		t.Fatalf("committed %v, want [0 1]", got)
	}
	m, err := remote.Get(context.Background(), h.st, h.prefix, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Files) != 1 || m.Files[0].Path != "model-2.bin" {
		t.Fatalf("step 1 holds %+v, want only model-2.bin", m.Files)
	}
}

// With a fresh state dir, the counter starts above the bucket's newest
// step: a new file never takes the number of a committed step (and is
// never skipped as "already committed").
func TestAgentFlatCounterStartsAboveBucket(t *testing.T) {
	flat := func(o *Options) { o.Detect.Layout = "flat" }
	h := startAgent(t, flat)
	writeTestFile(t, filepath.Join(h.watch, "a.bin"), 1<<20, 3)
	if left := h.flush(60 * time.Second); len(left) != 0 {
		t.Fatalf("not committed: %v", left)
	}
	h.stop()
	h.state = t.TempDir() // the state is lost; the bucket keeps step 0
	if err := os.Remove(filepath.Join(h.watch, "a.bin")); err != nil {
		t.Fatal(err)
	}
	writeTestFile(t, filepath.Join(h.watch, "b.bin"), 1<<20, 4)
	h.start(flat)
	if left := h.flush(60 * time.Second); len(left) != 0 {
		t.Fatalf("not committed: %v", left)
	}
	if got := h.committedSteps(); fmt.Sprint(got) != "[0 1]" {
		t.Fatalf("committed %v, want [0 1]: b.bin must be committed as a new step", got)
	}
}

// A state folder records whom it belongs to; another destination or
// watched directory is refused with one line saying why.
func TestStateDirRefusesAnotherIdentity(t *testing.T) {
	dir := t.TempDir()
	a := Identity{Destination: "s3://b/a", Watch: "/ckpt"}
	if err := ClaimStateDir(dir, a); err != nil {
		t.Fatal(err)
	}
	if err := ClaimStateDir(dir, a); err != nil {
		t.Fatalf("the same identity again: %v", err)
	}
	for _, other := range []Identity{{Destination: "s3://b/b", Watch: "/ckpt"}, {Destination: "s3://b/a", Watch: "/other"}} {
		err := ClaimStateDir(dir, other)
		if err == nil || !strings.Contains(err.Error(), "belongs to the agent of /ckpt -> s3://b/a") || strings.Contains(err.Error(), "\n") {
			t.Errorf("claim for %+v: %v, want one line naming the owner", other, err)
		}
	}
	if AgentStateDir("/base", a) == AgentStateDir("/base", Identity{Destination: "s3://b/b", Watch: "/ckpt"}) {
		t.Error("two destinations share a state folder")
	}
	st := store.NewMemStore()
	_, err := New(Options{Store: st, URL: "s3://b/b", Prefix: "b", StateDir: dir, Detect: detect.Options{Dir: "/ckpt"}})
	if err == nil || !strings.Contains(err.Error(), "belongs to the agent of") {
		t.Fatalf("New over another destination's state: %v", err)
	}
}

func writeTestFile(t *testing.T, path string, size int, seed byte) {
	t.Helper()
	b := make([]byte, size)
	for i := range b {
		b[i] = byte(i*7) ^ seed
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// Status lists a step found on disk that is still settling, before the
// agent takes it on.
func TestAgentStatusListsSettlingSteps(t *testing.T) {
	h := startAgent(t, func(o *Options) { o.Detect.Settle = 3 * time.Second; o.Detect.ExpectedRanks = 1 })
	sim := trainsim.Options{Dir: h.watch, Ranks: 1, FileSize: 1 << 20, Seed: 9}
	if err := trainsim.WriteStep(context.Background(), sim, 40); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := h.agent.Status()
		if len(st.Settling) == 1 && st.Settling[0].Step == 40 && st.Settling[0].State == "settling" && st.Settling[0].Files == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status never listed step 40 as settling: %+v", st.Settling)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if left := h.flush(60 * time.Second); len(left) != 0 {
		t.Fatalf("not committed: %v", left)
	}
	if st := h.agent.Status(); len(st.Settling) != 0 {
		t.Errorf("step still listed as settling after its commit: %+v", st.Settling)
	}
}
