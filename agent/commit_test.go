package agent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/internal/remote"
)

// The trainer's word: a step the layout would never complete (a tree auto
// does not recognise, a marker older than its files) is committed as soon
// as its files are closed, without the settle window (an hour here); a
// file still open for writing, a step that is not on disk, and a step
// committed before with other content are errors naming the problem.
func TestCommitByTrainer(t *testing.T) {
	h := startAgent(t, func(o *Options) {
		o.Detect.Layout, o.Detect.Settle, o.Detect.CloseWrite = "auto", time.Hour, true
	})
	<-h.agent.watching
	write := func(rel, content string) {
		t.Helper()
		p := filepath.Join(h.watch, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	commit := func(n int64, d time.Duration, paths ...string) error {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		return h.agent.Commit(ctx, n, paths, true)
	}
	// OLMo-like names no layout takes without a pattern: name the folder.
	write("run-a/model.bin", "weights of step 7")
	write("run-a/optim.bin", "optimizer of step 7")
	start := time.Now()
	if err := commit(7, 30*time.Second, "run-a"); err != nil {
		t.Fatalf("commit step 7: %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("step 7 took %v: the settle window decided", d)
	}
	m, err := remote.Get(context.Background(), h.st, h.prefix, 7)
	if err != nil || len(m.Files) != 2 || m.Files[0].Path != "run-a/model.bin" {
		t.Fatalf("step 7 committed as %+v (%v)", m, err)
	}
	// Committed again with the same content: at once.
	if err := commit(7, 10*time.Second, "run-a"); err != nil {
		t.Fatalf("commit step 7 again: %v", err)
	}
	// Other content under a committed step number.
	write("run-b/model.bin", "other weights")
	if err := commit(7, 10*time.Second, "run-b"); !errors.Is(err, nil) && !strings.Contains(err.Error(), "already committed with other content") {
		t.Fatalf("commit other content as step 7: %v", err)
	} else if err == nil {
		t.Fatal("other content committed as step 7")
	}
	// Nothing on disk.
	if err := commit(8, 10*time.Second); err == nil || !strings.Contains(err.Error(), "no step 8 on disk") {
		t.Fatalf("commit of a step not on disk: %v", err)
	}
	if err := commit(8, 10*time.Second, "../elsewhere"); err == nil || !strings.Contains(err.Error(), "not below the watched directory") {
		t.Fatalf("commit of a path outside: %v", err)
	}
	// Still open for writing: not durable when the timeout ends.
	if err := os.MkdirAll(filepath.Join(h.watch, "run-c"), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(h.watch, "run-c/model.bin"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString("half"); err != nil {
		t.Fatal(err)
	}
	if err := commit(9, 3*time.Second, "run-c"); err == nil || !strings.Contains(err.Error(), "still open for writing") {
		t.Fatalf("commit while a file is open: %v", err)
	}
	if _, err := remote.Get(context.Background(), h.st, h.prefix, 9); err == nil {
		t.Fatal("step 9 committed while a file was open for writing")
	}
	// Closed: the declaration stands? A new call after the close commits it.
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := commit(9, 30*time.Second, "run-c"); err != nil {
		t.Fatalf("commit step 9 once closed: %v", err)
	}
}

// The trainer declares a step its layout's evidence committed first (a DCP
// .metadata with closed shards beats the trainer's `ferry commit` call by
// a few milliseconds; with async_save's --no-wait form, always): the call
// succeeds at once, the watcher keeps nothing pending for it, and flush
// answers at once that everything is committed.
func TestCommitAfterLayoutCommitted(t *testing.T) {
	h := startAgent(t, func(o *Options) {
		o.Detect.Layout, o.Detect.Settle, o.Detect.CloseWrite = "auto", time.Hour, true
	})
	<-h.agent.watching
	for _, f := range []struct{ rel, content string }{
		{"step-2/__0_0.distcp", "shard 0 of step 2"},
		{"step-2/__1_0.distcp", "shard 1 of step 2"},
		{"step-2/.metadata", "metadata of step 2"},
	} {
		p := filepath.Join(h.watch, f.rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(f.content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		if _, err := remote.Get(ctx, h.st, h.prefix, 2); err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the layout did not commit step 2 from its .metadata")
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, wait := range []bool{false, true} {
		for _, paths := range [][]string{{"step-2"}, nil} {
			cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := h.agent.Commit(cctx, 2, paths, wait)
			ccancel()
			if err != nil {
				t.Fatalf("commit of the committed step 2 (wait %v, paths %v): %v", wait, paths, err)
			}
			fctx, fcancel := context.WithTimeout(context.Background(), 10*time.Second)
			left, err := h.agent.Flush(fctx)
			fcancel()
			if err != nil || len(left) != 0 {
				t.Fatalf("flush after commit of the committed step 2 (wait %v, paths %v): %v left, %v; pending %+v", wait, paths, left, err, h.agent.watcher.Pending())
			}
		}
	}
}
