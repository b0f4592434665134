package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// saveDCP writes DCP step n (two shards, .metadata last) and waits for
// its commit.
func (h *harness) saveDCP(n int64) {
	h.t.Helper()
	dir := fmt.Sprintf("step-%d/", n)
	writeAll(h.t, h.watch,
		dir+"__0_0.distcp", fmt.Sprintf("shard 0 of step %d", n),
		dir+"__1_0.distcp", fmt.Sprintf("shard 1 of step %d", n),
		dir+".metadata", fmt.Sprintf("metadata of step %d", n))
	h.waitCommitted(n)
}

// retained checks that the bucket holds exactly steps and the watch dir
// each path of present and none of gone.
func (h *harness) retained(steps []int64, present, gone []string) error {
	if got := h.committedSteps(); !slices.Equal(got, steps) {
		return fmt.Errorf("bucket holds steps %v, want %v", got, steps)
	}
	for _, rel := range present {
		if _, err := os.Stat(filepath.Join(h.watch, rel)); err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
	}
	for _, rel := range gone {
		if _, err := os.Stat(filepath.Join(h.watch, rel)); !os.IsNotExist(err) {
			return fmt.Errorf("%s still on disk (stat: %v)", rel, err)
		}
	}
	return nil
}

// waitRetained waits until retained holds.
func (h *harness) waitRetained(steps []int64, present, gone []string) {
	h.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := h.retained(steps, present, gone)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			h.t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Issue 47: a caller who may read the watch dir declares a file of its
// root as step 999,000 (within the bound above the newest step, 300), and
// again as 999,001. With --keep-remote 1 --keep-local 1 the old agent kept
// the newest step by number, the fake: every real step committed after it
// was pruned from the bucket and deleted from disk right after its commit,
// and the bucket held only the fakes. Declared above every step saved,
// they are held out of retention: kept, never counted, never pushing a
// real step out (and the second does not make the first count); each is
// logged once. The next real steps, 400 and 500, commit and are kept as
// the newest, with the fakes beside them; after a restart (the journal
// keeps the state) step 600 is too.
func TestDeclaredAheadHeldOutOfRetention(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	mod := func(o *Options) {
		o.Detect.Layout, o.Detect.Settle, o.Detect.CloseWrite = "auto", time.Hour, true
		o.KeepRemote, o.KeepLocal = 1, 1
		o.Logger = zap.New(core)
	}
	h := startAgent(t, mod)
	<-h.agent.watching
	for _, n := range []int64{100, 200, 300} {
		h.saveDCP(n)
		h.waitRetained([]int64{n}, []string{fmt.Sprintf("step-%d/.metadata", n)}, []string{fmt.Sprintf("step-%d", n-100)})
	}
	writeAll(t, h.watch, "notes.bin", "a caller's file", "notes2.bin", "another")
	for i, n := range []int64{999_000, 999_001} {
		if err := h.commit(n, true, 20*time.Second, []string{"notes.bin", "notes2.bin"}[i]); err != nil {
			t.Fatalf("declaring step %d: %v", n, err)
		}
	}
	fakes := []string{"notes.bin", "notes2.bin"}
	for _, n := range []int64{400, 500} {
		h.saveDCP(n)
		h.waitRetained([]int64{n, 999_000, 999_001}, append([]string{fmt.Sprintf("step-%d/.metadata", n)}, fakes...),
			[]string{fmt.Sprintf("step-%d", n-100)})
	}
	h.stop() // the last commit's retention is done when Run returns
	if err := h.retained([]int64{500, 999_000, 999_001}, append([]string{"step-500/__0_0.distcp"}, fakes...), []string{"step-400"}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int64{999_000, 999_001} {
		held := logs.FilterMessageSnippet("holding out a step declared ahead").FilterField(zap.Int64("step", n)).Len()
		if held != 1 {
			t.Errorf("step %d: logged held out %d times, want once", n, held)
		}
	}
	h.start(mod)
	<-h.agent.watching
	h.saveDCP(600)
	h.stop()
	if err := h.retained([]int64{600, 999_000, 999_001}, []string{"step-600/.metadata", "notes.bin"}, []string{"step-500"}); err != nil {
		t.Fatalf("after a restart: %v", err)
	}
}

// A trainer declaring every save of a layout ferry does not number (files
// in the watch dir's root) still gets retention: each declared step is
// passed by the next, so all but the newest count. With --keep-remote 2
// --keep-local 2, steps 10..50 leave 30 and 40 (the two newest counted)
// and 50 (the newest, held until a later save passes it). The old agent
// kept 40 and 50 only.
func TestDeclaredStepsPassEachOther(t *testing.T) {
	h := startAgent(t, func(o *Options) {
		o.Detect.Layout, o.Detect.Settle, o.Detect.CloseWrite = "auto", time.Hour, true
		o.KeepRemote, o.KeepLocal = 2, 2
	})
	<-h.agent.watching
	for n := int64(10); n <= 50; n += 10 {
		name := fmt.Sprintf("save-%d.bin", n)
		writeAll(t, h.watch, name, fmt.Sprintf("weights at step %d", n))
		if err := h.commit(n, true, 20*time.Second, name); err != nil {
			t.Fatalf("declaring step %d: %v", n, err)
		}
	}
	h.stop()
	if err := h.retained([]int64{30, 40, 50}, []string{"save-30.bin", "save-40.bin", "save-50.bin"},
		[]string{"save-10.bin", "save-20.bin"}); err != nil {
		t.Fatal(err)
	}
}
