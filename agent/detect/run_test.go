package detect

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Run tests use a short settle window and wait for events, never for time
// to pass: a slow machine makes them slower, not flaky.
const (
	runSettle   = 300 * time.Millisecond
	runDebounce = 50 * time.Millisecond
)

func runOpts(dir, layout string) Options {
	return Options{Dir: dir, Layout: layout, Settle: runSettle, Debounce: runDebounce}
}

func TestRunGrowingFileIsNotReportedUntilSettled(t *testing.T) {
	dir := t.TempDir()
	opts := runOpts(dir, "flat")
	opts.StepPattern = `^model-(\d+)\.pt$`
	opts.Settle = 2 * time.Second // 20 times the writer's pauses
	w := newWatcher(t, opts)
	r := start(t, w)

	const chunks, chunk = 15, 4096
	var finished atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer finished.Store(true)
		f, err := os.Create(filepath.Join(dir, "model-100.pt"))
		if err != nil {
			t.Error(err)
			return
		}
		defer f.Close()
		buf := make([]byte, chunk)
		for i := 0; i < chunks; i++ {
			if _, err := f.Write(buf); err != nil {
				t.Error(err)
				return
			}
			time.Sleep(100 * time.Millisecond) // longer than the debounce, shorter than settle
		}
	}()
	ev := r.expect(Complete, 100)
	if !finished.Load() {
		t.Error("step reported while its file was still being written")
	}
	wg.Wait()
	if got := ev.Step.Files[0].Size; got != chunks*chunk {
		t.Errorf("reported size %d, want %d", got, chunks*chunk)
	}
}

func TestRunDCPCompletesOnRename(t *testing.T) {
	dir := t.TempDir()
	w := newWatcher(t, runOpts(dir, "dcp"))
	r := start(t, w)
	write(t, dir, "step_100/__0_0.distcp", "shard 0")
	write(t, dir, "step_100/__1_0.distcp", "shard 1")
	write(t, dir, "step_100/.metadata.tmp", "md")
	// A later step that completes proves the watcher evaluated step_100's
	// settled files too, and did not report them.
	write(t, dir, "step_50/__0_0.distcp", "shard 0")
	write(t, dir, "step_50/.metadata", "md")
	r.expect(Complete, 50)
	if err := os.Rename(filepath.Join(dir, "step_100/.metadata.tmp"), filepath.Join(dir, "step_100/.metadata")); err != nil {
		t.Fatal(err)
	}
	ev := r.expect(Complete, 100)
	if len(ev.Step.Files) != 3 || ev.Step.Files[0].RelPath != "step_100/.metadata" {
		t.Errorf("files %v", ev.Step.Files)
	}
}

func TestRunNestedFoldersAndDeletion(t *testing.T) {
	dir := t.TempDir()
	w := newWatcher(t, runOpts(dir, "megatron"))
	r := start(t, w)
	// Folders created faster than watches can be added: the listing after
	// each new watch finds what the events missed.
	write(t, dir, "iter_0000100/mp_rank_00/model_optim_rng.pt", "tp0")
	write(t, dir, "iter_0000100/mp_rank_01/model_optim_rng.pt", "tp1")
	write(t, dir, "latest_checkpointed_iteration.txt", "100")
	ev := r.expect(Complete, 100)
	if len(ev.Step.Files) != 2 {
		t.Errorf("files %v", ev.Step.Files)
	}
	// A pending step deleted gives nothing; a reported one gives Deleted.
	write(t, dir, "iter_0000200/mp_rank_00/model_optim_rng.pt", "tp0")
	if err := os.RemoveAll(filepath.Join(dir, "iter_0000200")); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dir, "iter_0000100")); err != nil {
		t.Fatal(err)
	}
	r.expect(Deleted, 100)
	write(t, dir, "iter_0000300/mp_rank_00/model_optim_rng.pt", "tp0")
	write(t, dir, "latest_checkpointed_iteration.txt", "300")
	r.expect(Complete, 300)
}

func TestRunPoll(t *testing.T) {
	dir := t.TempDir()
	opts := runOpts(dir, "auto")
	opts.Poll, opts.PollInterval = true, 100*time.Millisecond
	w := newWatcher(t, opts)
	r := start(t, w)
	write(t, dir, "global_step5/mp_rank_00_model_states.pt", "m")
	write(t, dir, "latest", "global_step5")
	ev := r.expect(Complete, 5)
	if w.LayoutName() != "deepspeed" {
		t.Errorf("layout %q", w.LayoutName())
	}
	if len(ev.Step.Generated) != 1 {
		t.Errorf("generated %v", ev.Step.Generated)
	}
}

func TestRunIdleDoesNothing(t *testing.T) {
	dir := copyTree(t, "hf")
	opts := runOpts(dir, "hf")
	opts.Rescan = time.Hour
	w := newWatcher(t, opts)
	r := start(t, w)
	r.expect(Complete, 500)
	r.expect(Complete, 1000)
	// checkpoint-1500 waits for its marker: no timer may be armed for it.
	// Nothing at all may happen now, so any evaluation is a failure and
	// the wait needs no tuning.
	n := w.evals.Load()
	time.Sleep(time.Second)
	if got := w.evals.Load(); got != n {
		t.Errorf("%d evaluations while idle", got-n)
	}
}

func TestRunRenamedFolderIsWatched(t *testing.T) {
	dir := t.TempDir()
	opts := runOpts(dir, "hf")
	opts.Rescan = time.Hour // events alone must do it
	w := newWatcher(t, opts)
	r := start(t, w)
	// Written under a temporary name, then renamed into place (as some
	// Trainer versions and Orbax do).
	write(t, dir, "tmp-checkpoint-7/model.safetensors", "m")
	write(t, dir, "tmp-checkpoint-7/trainer_state.json", "{}")
	// Step 3, written after, completing shows the watcher has seen and
	// watched the temporary folder before it is renamed.
	write(t, dir, "checkpoint-3/model.safetensors", "m")
	write(t, dir, "checkpoint-3/trainer_state.json", "{}")
	r.expect(Complete, 3)
	if err := os.Rename(filepath.Join(dir, "tmp-checkpoint-7"), filepath.Join(dir, "checkpoint-7")); err != nil {
		t.Fatal(err)
	}
	ev := r.expect(Complete, 7)
	if len(ev.Step.Files) != 2 || ev.Step.Files[0].RelPath != "checkpoint-7/model.safetensors" {
		t.Errorf("files %v", ev.Step.Files)
	}
	// The renamed folder must still be watched: a late file is seen (a
	// rank's RNG state, which may land after trainer_state.json).
	write(t, dir, "checkpoint-7/rng_state_1.pth", "late")
	ev = r.expect(Deleted, 7)
	if !errors.Is(ev.Err, ErrChanged) {
		t.Errorf("err %v, want ErrChanged", ev.Err)
	}
	ev = r.expect(Complete, 7)
	if len(ev.Step.Files) != 3 {
		t.Errorf("files %v", ev.Step.Files)
	}
}

func TestRunEndsWhenTheFolderDisappears(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "ckpt")
	write(t, dir, "checkpoint-1/trainer_state.json", "{}")
	w := newWatcher(t, runOpts(dir, "hf"))
	ctx, cancel := context.WithCancel(context.Background())
	events := make(chan Event, 10)
	done := make(chan error, 1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		done <- w.Run(ctx, events)
	}()
	defer wg.Wait()
	defer cancel()
	select {
	case ev := <-events:
		if ev.Kind != Complete {
			t.Fatalf("event %v", ev)
		}
	case <-time.After(waitTimeout):
		t.Fatal("no event")
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "disappeared") {
			t.Errorf("Run returned %v", err)
		}
	case <-time.After(waitTimeout):
		t.Fatal("Run did not end")
	}
}
