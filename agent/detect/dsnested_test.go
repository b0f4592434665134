package detect

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// lightningDS builds Lightning's DeepSpeedStrategy folder for step 100
// from the real ZeRO-2 save zero2-dp4 (dp_world_size 4): rank 0's model
// states and the optimizer files of ranks, zero_to_fp32.py, all an hour
// old. It returns the watch dir and the step folder.
func lightningDS(t *testing.T, ranks ...int) (string, string) {
	t.Helper()
	src := copyDS(t, "zero2-dp4")
	dir := t.TempDir()
	step := filepath.Join(dir, "epoch=0-step=100.ckpt")
	tag := filepath.Join(step, "checkpoint")
	if err := os.MkdirAll(tag, 0o755); err != nil {
		t.Fatal(err)
	}
	names := []string{"mp_rank_00_model_states.pt"}
	for _, r := range ranks {
		names = append(names, "zero_pp_rank_"+itoa(int64(r))+"_mp_rank_00_optim_states.pt")
	}
	for _, n := range names {
		if err := os.Rename(filepath.Join(src, "global_step100", n), filepath.Join(tag, n)); err != nil {
			t.Fatal(err)
		}
	}
	write(t, dir, "epoch=0-step=100.ckpt/zero_to_fp32.py", "#!/usr/bin/env python")
	age(t, dir)
	return dir, step
}

// TestLightningDeepSpeedNested: the deepspeed layout reads Lightning's
// DeepSpeedStrategy folder (testdata/saveorders/lightning-deepspeed.trace):
// its own latest is the marker, fresh only when newer than rank 0's
// files, and rank 0's model states record (dp_world_size 4) holds it
// until every rank's optimizer file is in the tag folder. Before, no
// layout read it and flat's settle window committed a save killed
// halfway.
func TestLightningDeepSpeedNested(t *testing.T) {
	dir, step := lightningDS(t, 0, 1, 2)
	opts := Options{Dir: dir, Layout: "deepspeed"}
	if c, ok := candidates(t, opts)[100]; !ok || c.Finished || !strings.Contains(c.Waiting, "latest does not name") {
		t.Fatalf("no latest yet: found %v finished %v (%s)", ok, c.Finished, c.Waiting)
	}
	latest := filepath.Join(step, "latest")
	write(t, dir, "epoch=0-step=100.ckpt/latest", "checkpoint")
	setTime(t, latest, time.Now().Add(-2*time.Hour))
	if c := candidates(t, opts)[100]; c.Finished || !c.Stale {
		t.Fatalf("latest older than rank 0's files: finished %v stale %v (%s)", c.Finished, c.Stale, c.Waiting)
	}
	setTime(t, latest, time.Now())
	c := candidates(t, opts)[100]
	want := "record: epoch=0-step=100.ckpt/checkpoint/zero_pp_rank_3_mp_rank_00_optim_states.pt is not here"
	if !c.Finished || !strings.HasPrefix(c.Held, want) {
		t.Fatalf("rank 3's optimizer file missing: finished %v held %q, want %q", c.Finished, c.Held, want)
	}
	write(t, dir, "epoch=0-step=100.ckpt/checkpoint/zero_pp_rank_3_mp_rank_00_optim_states.pt", "rank 3")
	c = candidates(t, opts)[100]
	if !c.Finished || c.Held != "" || c.Step.Marker != "epoch=0-step=100.ckpt/latest" || len(c.Step.Generated) != 0 {
		t.Fatalf("whole: finished %v held %q marker %q generated %v", c.Finished, c.Held, c.Step.Marker, c.Step.Generated)
	}
	if c := candidates(t, Options{Dir: dir, Layout: "auto"})[100]; !c.Finished || c.Held != "" {
		t.Fatalf("auto: finished %v held %q (%s): the folder is not recognised as DeepSpeed's", c.Finished, c.Held, c.Waiting)
	}
}

// TestLightningDeepSpeedUnreadRecord: where rank 0's model states are no
// record ferry reads (the trace replay writes stand-in bytes), latest
// written before another rank's optimizer file does not complete the
// step with --expected-ranks: the watcher reports it only once that
// rank's file is there.
func TestLightningDeepSpeedUnreadRecord(t *testing.T) {
	dir := t.TempDir()
	w := newWatcher(t, Options{Dir: dir, Layout: "deepspeed", ExpectedRanks: 2, Settle: 300 * time.Millisecond, Debounce: 50 * time.Millisecond})
	r := start(t, w)
	<-w.Ready()
	f := "epoch=0-step=100.ckpt/"
	write(t, dir, f+"checkpoint/mp_rank_00_model_states.pt", "not a torch.save zip")
	write(t, dir, f+"checkpoint/zero_pp_rank_0_mp_rank_00_optim_states.pt", "rank 0")
	write(t, dir, f+"zero_to_fp32.py", "#!/usr/bin/env python")
	write(t, dir, f+"latest", "checkpoint")
	r.noVersion(2*time.Second, "before rank 1's optimizer file")
	write(t, dir, f+"checkpoint/zero_pp_rank_1_mp_rank_00_optim_states.pt", "rank 1")
	ev := r.expect(Complete, 100)
	if got := strings.Join(describe(ev.Step), " "); !strings.Contains(got, f+"latest") || !strings.Contains(got, "zero_pp_rank_1") {
		t.Fatalf("step files %s: want the folder's latest and rank 1's file", got)
	}
}
