package agent

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/internal/remote"
)

// writeAll writes each path (relative to dir) with the content after it,
// in order (a marker last).
func writeAll(t *testing.T, dir string, files ...string) {
	t.Helper()
	for i := 0; i+1 < len(files); i += 2 {
		rel, content := files[i], files[i+1]
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// waitCommitted waits until step n's manifest is in the bucket.
func (h *harness) waitCommitted(n int64) {
	h.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := remote.Get(context.Background(), h.st, h.prefix, n); err == nil {
			return
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("step %d not committed", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (h *harness) commit(n int64, wait bool, d time.Duration, paths ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return h.agent.Commit(ctx, n, paths, wait)
}

// Issue 47: a caller declared step 999999999999 made of the real step
// 300's .metadata; the agent committed it as the newest step, and with
// --keep-remote 1 --keep-local 1 pruned step 300 from the bucket and
// deleted its files. A step far above every step the agent knows is
// refused in one line, and so is one outside the manifest's range
// (2^63-1 was retried for ever); step 300 stays, in the bucket and on disk.
func TestDeclareFarStepRefused(t *testing.T) {
	h := startAgent(t, func(o *Options) {
		o.Detect.Layout, o.Detect.Settle, o.Detect.CloseWrite = "auto", time.Hour, true
		o.KeepRemote, o.KeepLocal = 1, 1
	})
	<-h.agent.watching
	writeAll(t, h.watch,
		"step-300/__0_0.distcp", "shard 0 of step 300",
		"step-300/__1_0.distcp", "shard 1 of step 300",
		"step-300/.metadata", "metadata of step 300")
	h.waitCommitted(300)
	err := h.commit(999_999_999_999, true, 20*time.Second, "step-300/.metadata")
	if err == nil || !strings.Contains(err.Error(), "more than 1000000 above the newest step this agent knows (300)") ||
		strings.Contains(err.Error(), "\n") {
		t.Errorf("declaring step 999999999999: %v", err)
	}
	for _, n := range []int64{math.MaxInt64, -1} {
		if err := h.commit(n, false, 5*time.Second); err == nil || !strings.Contains(err.Error(), "outside 0..999999999999") {
			t.Errorf("declaring step %d: %v", n, err)
		}
	}
	if _, err := remote.Get(context.Background(), h.st, h.prefix, 999_999_999_999); err == nil {
		t.Error("step 999999999999 was committed")
	}
	if _, err := remote.Get(context.Background(), h.st, h.prefix, 300); err != nil {
		t.Errorf("step 300 is gone from the bucket: %v", err)
	}
	for _, rel := range []string{"step-300/.metadata", "step-300/__0_0.distcp"} {
		if _, err := os.Stat(filepath.Join(h.watch, rel)); err != nil {
			t.Errorf("%s: %v (deleted by --keep-local after the declared step)", rel, err)
		}
	}
}

// --keep-local never deletes a file a kept step references: step 2 is
// declared with step 1's config file, and step 3, the newest, with its
// extra file. Declared in the root's folders, which no layout numbers,
// step 3 is held out of retention until a later save passes it
// (retention_hold.go), so keeping one step keeps step 2 and step 3, and
// deletes step 1's own file but neither the file step 2 references nor
// the one the held step 3 does.
func TestKeepLocalKeepsReferencedFiles(t *testing.T) {
	h := startAgent(t, func(o *Options) {
		o.Detect.Layout, o.Detect.Settle, o.Detect.CloseWrite = "auto", time.Hour, true
		o.KeepLocal = 1
	})
	<-h.agent.watching
	writeAll(t, h.watch, "run-1/model.bin", "weights 1", "run-1/config.json", "shared config", "run-1/extra.json", "extra")
	if err := h.commit(1, true, 20*time.Second, "run-1"); err != nil {
		t.Fatal(err)
	}
	writeAll(t, h.watch, "run-2/model.bin", "weights 2")
	if err := h.commit(2, true, 20*time.Second, "run-2", "run-1/config.json"); err != nil {
		t.Fatal(err)
	}
	writeAll(t, h.watch, "run-3/model.bin", "weights 3")
	if err := h.commit(3, true, 20*time.Second, "run-3", "run-1/extra.json"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(h.watch, "run-1/model.bin")); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("--keep-local 1 kept step 1's own file")
		}
		time.Sleep(20 * time.Millisecond)
	}
	h.stop() // the last commit's retention is done when Run returns
	for _, rel := range []string{"run-1/config.json", "run-1/extra.json", "run-2/model.bin", "run-3/model.bin"} {
		if _, err := os.Stat(filepath.Join(h.watch, rel)); err != nil {
			t.Errorf("%s, which a kept step references: %v", rel, err)
		}
	}
}

// A path named many times, or below a folder also named, is one file of
// the step, uploaded once (issue 47: ten times, then the manifest was
// refused and the step retried for ever).
func TestDeclareDuplicatePathsFolded(t *testing.T) {
	h := startAgent(t, func(o *Options) {
		o.Detect.Layout, o.Detect.Settle, o.Detect.CloseWrite = "auto", time.Hour, true
	})
	<-h.agent.watching
	writeAll(t, h.watch, "run/a.bin", "aaaa", "run/b.bin", "bbbbbb")
	paths := []string{"run", "run/a.bin", "./run/a.bin", filepath.Join(h.watch, "run/b.bin")}
	for range 7 {
		paths = append(paths, "run/a.bin")
	}
	if err := h.commit(5, true, 20*time.Second, paths...); err != nil {
		t.Fatalf("commit: %v", err)
	}
	m, err := remote.Get(context.Background(), h.st, h.prefix, 5)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Files) != 2 {
		t.Errorf("manifest has %d files, want 2: %+v", len(m.Files), m.Files)
	}
	if sent := h.agent.traffic.sent.Load(); sent != 10 {
		t.Errorf("sent %d bytes, want 10 (each file once)", sent)
	}
}

// Declarations waiting to be durable are capped: the 65th open one is
// refused in one line, and a path list longer than the cap too.
func TestDeclarationsCapped(t *testing.T) {
	h := startAgent(t, func(o *Options) {
		o.Detect.Layout, o.Detect.Settle, o.Detect.CloseWrite = "auto", time.Hour, true
	})
	<-h.agent.watching
	for n := range int64(MaxOpenDeclarations) {
		if err := h.commit(n, false, 5*time.Second); err != nil {
			t.Fatalf("declaration %d: %v", n, err)
		}
	}
	err := h.commit(MaxOpenDeclarations, false, 5*time.Second)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("at most %d at once", MaxOpenDeclarations)) {
		t.Errorf("declaration %d: %v", MaxOpenDeclarations, err)
	}
	many := make([]string, MaxDeclarePaths+1)
	for i := range many {
		many[i] = "x"
	}
	if err := h.commit(1, false, 5*time.Second, many...); err == nil || !strings.Contains(err.Error(), "paths: at most") {
		t.Errorf("a declaration of %d paths: %v", len(many), err)
	}
}
