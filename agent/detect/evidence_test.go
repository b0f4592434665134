package detect

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// The completion evidence of each layout (proof.go): what holds a step
// back, what counts as a rank, and what proves the file set.

// DeepSpeed: rank 0 writes latest after its own files while rank 1 is
// between its model states and its optimizer states.
func TestDeepSpeedRankBetweenModelAndOptimizerStates(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"zero_pp_rank_0_mp_rank_00_model_states.pt", "zero_pp_rank_0_mp_rank_00_optim_states.pt",
		"zero_pp_rank_1_mp_rank_00_model_states.pt"} {
		write(t, dir, "global_step100/"+f, f)
	}
	write(t, dir, "latest", "global_step100")
	for _, ranks := range []int{0, 2} {
		h := newHarness(t, dir, Options{Layout: "deepspeed", ExpectedRanks: ranks})
		h.expect(0)
		h.expect(time.Hour)
		if p := h.w.Pending(); len(p) != 1 || !strings.Contains(p[0].Reason, "optimizer states not written yet for zero_pp_rank_1_mp_rank_00") {
			t.Fatalf("expected ranks %d: pending %+v", ranks, p)
		}
	}
	write(t, dir, "global_step100/zero_pp_rank_1_mp_rank_00_optim_states.pt", "optim 1")
	h := newHarness(t, dir, Options{Layout: "deepspeed", ExpectedRanks: 2})
	h.expect(0)
	h.expect(testSettle, "complete 100")
}

// DeepSpeed with tensor parallelism: names carry no global rank, but each
// writer (dp, mp) counts towards ExpectedRanks.
func TestExpectedRanksCountWritersWithoutRanks(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"zero_pp_rank_0_mp_rank_00_optim_states.pt", "zero_pp_rank_0_mp_rank_01_optim_states.pt",
		"mp_rank_00_model_states.pt", "mp_rank_01_model_states.pt"} {
		write(t, dir, "global_step100/"+f, f)
	}
	write(t, dir, "latest", "global_step100")
	h := newHarness(t, dir, Options{Layout: "deepspeed", ExpectedRanks: 2})
	h.expect(0)
	h.expect(testSettle, "complete 100")

	// Megatron pipeline folders: mp_rank_TT_PPP.
	dir = t.TempDir()
	write(t, dir, "iter_0000100/mp_rank_00_000/model_optim_rng.pt", "a")
	write(t, dir, "iter_0000100/mp_rank_00_001/model_optim_rng.pt", "b")
	write(t, dir, megatronTracker, "100")
	h = newHarness(t, dir, Options{Layout: "megatron", ExpectedRanks: 2})
	h.expect(0)
	h.expect(testSettle, "complete 100")
}

// Hugging Face: another rank's RNG state lands after trainer_state.json;
// FSDP shards of that rank do not count it as done.
func TestHFRankRNGStateAfterMarker(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"pytorch_model_fsdp_0/__0_0.distcp", "pytorch_model_fsdp_0/__1_0.distcp", "rng_state_0.pth", "trainer_state.json"} {
		write(t, dir, "checkpoint-100/"+f, f)
	}
	h := newHarness(t, dir, Options{Layout: "hf", ExpectedRanks: 2})
	h.expect(0)
	h.expect(time.Hour)
	write(t, dir, "checkpoint-100/rng_state_1.pth", "rng 1")
	h.expect(0)
	h.expect(testSettle, "complete 100")
}

// Composer, second save: rank 0 repoints its link at batch 20 while rank
// 1's still names batch 10 and rank 1 has no file of batch 20 yet.
func TestComposerRankASaveBehindWithoutAFile(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "ep0-ba10-rank0.pt", "r0 b10")
	write(t, dir, "ep0-ba10-rank1.pt", "r1 b10")
	write(t, dir, "ep0-ba20-rank0.pt", "r0 b20")
	symlink(t, dir, "latest-rank0.pt", "ep0-ba20-rank0.pt")
	symlink(t, dir, "latest-rank1.pt", "ep0-ba10-rank1.pt")
	age(t, dir)
	h := newHarness(t, dir, Options{Layout: "composer"})
	h.expect(0)
	h.expect(time.Hour, "complete 10")
	write(t, dir, "ep0-ba20-rank1.pt", "r1 b20")
	h.expect(time.Hour)
	symlink(t, dir, "latest-rank1.pt", "ep0-ba20-rank1.pt")
	evs := h.expect(testSettle, "complete 20")
	if n := len(evs[0].Step.Files); n != 2 {
		t.Fatalf("step 20 reported with %d files", n)
	}
}

// A Composer run rolled back to batch 100 repoints its links at it: batch
// 200, which the links declared complete before (every rank named it after
// writing its file), stays complete, though its settle window had not
// ended; a rank's link naming an earlier batch still holds a step it never
// declared (fuzzer seed 7, composer).
func TestComposerRollbackKeepsDeclaredStep(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "ep0-ba100-rank0.pt", "r0 b100")
	symlink(t, dir, "latest-rank0.pt", "ep0-ba100-rank0.pt")
	age(t, dir)
	h := newHarness(t, dir, Options{Layout: "composer"})
	h.expect(0)
	h.expect(testSettle, "complete 100")
	write(t, dir, "ep0-ba200-rank0.pt", "r0 b200")
	write(t, dir, "ep0-ba300-rank0.pt", "r0 b300, its link never repointed")
	h.expect(0)
	symlink(t, dir, "latest-rank0.pt", "ep0-ba200-rank0.pt")
	h.expect(testSettle / 2)
	write(t, dir, "ep0-ba100-rank0.pt", "r0 b100, saved again")
	symlink(t, dir, "latest-rank0.pt", "ep0-ba100-rank0.pt")
	h.expect(testSettle/2, "deleted 100", "complete 200")
	h.expect(testSettle, "complete 100")
	h.expect(time.Hour)
	if p := h.w.Pending(); len(p) != 1 || p[0].Step != 300 || !strings.Contains(p[0].Reason, "still names batch 100") {
		t.Fatalf("pending %+v, want step 300 held by its rank's link", p)
	}
}

// Composer ranks rotate their own files: rank 0 saves batch 200 and
// removes its file of batch 100, and the job dies before rank 1 saves. What
// is left of batch 100, rank 1's file under a link that names it, was never
// a state the trainer saved: it waits with the reason, and once rank 1's
// file goes too the step, complete before, is reported lost (fuzzer seed
// 900, composer).
func TestComposerRotationShrinkingADeclaredStep(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "ep0-ba100-rank0.pt", "r0 b100")
	write(t, dir, "ep0-ba100-rank1.pt", "r1 b100")
	symlink(t, dir, "latest-rank0.pt", "ep0-ba100-rank0.pt")
	symlink(t, dir, "latest-rank1.pt", "ep0-ba100-rank1.pt")
	age(t, dir)
	h := newHarness(t, dir, Options{Layout: "composer"})
	h.expect(0)
	write(t, dir, "ep0-ba200-rank0.pt", "r0 b200")
	symlink(t, dir, "latest-rank0.pt", "ep0-ba200-rank0.pt")
	if err := os.Remove(filepath.Join(dir, "ep0-ba100-rank0.pt")); err != nil {
		t.Fatal(err)
	}
	h.expect(testSettle / 2)
	h.expect(time.Hour)
	p := h.w.Pending()
	if len(p) != 2 || p[0].Step != 100 || !strings.Contains(p[0].Reason, "ep0-ba100-rank0.pt was deleted after") {
		t.Fatalf("pending %+v, want step 100 held: part of it was rotated away", p)
	}
	if err := os.Remove(filepath.Join(dir, "ep0-ba100-rank1.pt")); err != nil {
		t.Fatal(err)
	}
	h.expect(0, "lost 100")
}

// A Composer job killed after rank 0 saved batch 200 and removed its link,
// before rank 1 saved: the restarted job saves batch 300 on both ranks, so
// every link names a later batch and none is behind. Rank 0's file of 200
// was never vouched for by its link (ferry never saw it naming 200): the
// step waits with the reason, never committed (fuzzer seed 42, composer).
func TestComposerSaveInterruptedBeforeItsLink(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "ep0-ba100-rank0.pt", "r0 b100")
	write(t, dir, "ep0-ba100-rank1.pt", "r1 b100")
	symlink(t, dir, "latest-rank0.pt", "ep0-ba100-rank0.pt")
	symlink(t, dir, "latest-rank1.pt", "ep0-ba100-rank1.pt")
	age(t, dir)
	h := newHarness(t, dir, Options{Layout: "composer"})
	h.expect(0)
	h.expect(testSettle, "complete 100")
	write(t, dir, "ep0-ba200-rank0.pt", "r0 b200")
	if err := os.Remove(filepath.Join(dir, "latest-rank0.pt")); err != nil {
		t.Fatal(err)
	}
	h.expect(0)
	write(t, dir, "ep1-ba300-rank0.pt", "r0 b300")
	symlink(t, dir, "latest-rank0.pt", "ep1-ba300-rank0.pt")
	write(t, dir, "ep1-ba300-rank1.pt", "r1 b300")
	symlink(t, dir, "latest-rank1.pt", "ep1-ba300-rank1.pt")
	h.expect(0)
	h.expect(testSettle, "complete 300")
	h.expect(time.Hour)
	if p := h.w.Pending(); len(p) != 1 || p[0].Step != 200 || !strings.Contains(p[0].Reason, "names a later batch and was not seen naming this batch") {
		t.Fatalf("pending %+v, want step 200 waiting: its rank's link never named it", p)
	}
	// Killed again, between rank 1's file of batch 400 and its new link,
	// after rank 0 saved 400: rank 1's file of 400 is whole, but its
	// link, missing, never named it (fuzzer seed 180, composer).
	write(t, dir, "ep1-ba400-rank0.pt", "r0 b400")
	symlink(t, dir, "latest-rank0.pt", "ep1-ba400-rank0.pt")
	write(t, dir, "ep1-ba400-rank1.pt", "r1 b400")
	if err := os.Remove(filepath.Join(dir, "latest-rank1.pt")); err != nil {
		t.Fatal(err)
	}
	h.expect(0)
	h.expect(time.Hour)
	if p := h.w.Pending(); len(p) != 2 || p[1].Step != 400 || !strings.Contains(p[1].Reason, "latest-rank1.pt is missing and was not seen naming this batch") {
		t.Fatalf("pending %+v, want step 400 waiting: rank 1's link is gone", p)
	}
}

// Megatron: the tracker proves a step only when seen changing to name it.
func TestMegatronProofNeedsTrackerChange(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "iter_0000100/mp_rank_00/model_optim_rng.pt", "a")
	write(t, dir, megatronTracker, "200") // a run resumed from 100
	h := newHarness(t, dir, Options{Layout: "megatron"})
	h.expect(0)
	cands := h.w.engine.candidates()
	if len(cands) != 1 || cands[0].Proof != ProofNone || !cands[0].Finished {
		t.Fatalf("candidates %+v: want finished by the tracker, proof none", cands)
	}
	write(t, dir, "iter_0000300/mp_rank_00/model_optim_rng.pt", "b")
	h.expect(testSettle, "complete 100")
	write(t, dir, megatronTracker, "300")
	h.expect(0)
	for _, c := range h.w.engine.candidates() {
		if c.Step.Number == 300 && c.Proof != ProofMarker {
			t.Fatalf("iteration 300 after the tracker changed: proof %v", c.Proof)
		}
	}
}

// A step folder that is a link is never followed: it waits, says why in
// status and warns once its wait reaches a settle window.
func TestSymlinkedStepFolderWarns(t *testing.T) {
	dir := t.TempDir()
	elsewhere := t.TempDir()
	write(t, elsewhere, "mp_rank_00_model_states.pt", "m")
	if err := os.Symlink(elsewhere, filepath.Join(dir, "global_step100")); err != nil {
		t.Fatal(err)
	}
	write(t, dir, "latest", "global_step100")
	core, logs := observer.New(zap.WarnLevel)
	h := newHarness(t, dir, Options{Layout: "deepspeed", Logger: zap.New(core)})
	h.expect(0)
	h.expect(time.Hour)
	p := h.w.Pending()
	if len(p) != 1 || !strings.Contains(p[0].Reason, "symbolic link") {
		t.Fatalf("pending %+v", p)
	}
	if logs.FilterMessageSnippet("not complete").Len() != 1 {
		t.Fatalf("warnings %v", logs.All())
	}
}

// Expected ranks the names never carry: a warning, once.
func TestExpectedRanksShortfallWarns(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "step_100/__0_0.distcp", "0")
	write(t, dir, "step_100/.metadata", "md")
	core, logs := observer.New(zap.WarnLevel)
	h := newHarness(t, dir, Options{Layout: "dcp", ExpectedRanks: 2, Logger: zap.New(core)})
	h.expect(0)
	h.expect(testSettle)
	h.expect(time.Hour)
	if w := logs.FilterMessageSnippet("not complete").All(); len(w) != 1 || !strings.Contains(w[0].Message, "--expected-ranks") {
		t.Fatalf("warnings %v", logs.All())
	}
}

// Orbax writes "<step>.orbax-checkpoint-tmp-<n>" and renames it: never a
// step of its own in flat counter mode.
func TestOrbaxTemporaryFolderIsNotAStep(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "100.orbax-checkpoint-tmp-1733300000/state/data", "d")
	h := newHarness(t, dir, Options{Layout: "flat"})
	h.expect(0)
	h.expect(time.Hour)
	if err := os.Rename(filepath.Join(dir, "100.orbax-checkpoint-tmp-1733300000"), filepath.Join(dir, "100")); err != nil {
		t.Fatal(err)
	}
	h.expect(0)
	evs := h.expect(testSettle, "complete name:100")
	if len(evs[0].Step.Files) != 1 || evs[0].Step.Files[0].RelPath != "100/state/data" {
		t.Fatalf("files %+v", evs[0].Step.Files)
	}
}

// A step folder removed and created again within one debounce window is
// a new folder: watched and listed at once, not at the next full rescan.
func TestRunRecreatedFolderWatchedAtOnce(t *testing.T) {
	dir := t.TempDir()
	opts := runOpts(dir, "dcp")
	opts.Debounce = 300 * time.Millisecond
	opts.Rescan = time.Hour
	w := newWatcher(t, opts)
	r := start(t, w)
	write(t, dir, "step_100/__0_0.distcp", "first save")
	write(t, dir, "step_100/.metadata", "md")
	r.expect(Complete, 100)
	if err := os.RemoveAll(filepath.Join(dir, "step_100")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "step_100"), 0o755); err != nil {
		t.Fatal(err)
	}
	r.expect(Deleted, 100)
	// Written after the folder's event was applied: only a watch on the
	// new folder sees these.
	time.Sleep(2 * opts.Debounce)
	write(t, dir, "step_100/__0_0.distcp", "second save, longer")
	write(t, dir, "step_100/.metadata", "md 2")
	if ev := r.expect(Complete, 100); shardSize(ev) != int64(len("second save, longer")) {
		t.Fatalf("step 100 reported with a shard of %d bytes", shardSize(ev))
	}
}

// A step-named link tells nothing about what it points at: a link to a
// folder outside, to a file and to nothing at all wait alike (a stat
// through the link, as root, would say which exist).
func TestSymlinkedStepFolderIsNoOracle(t *testing.T) {
	elsewhere := t.TempDir()
	write(t, elsewhere, "secret/mp_rank_00_model_states.pt", "m")
	var reasons []string
	for _, target := range []string{filepath.Join(elsewhere, "secret"), filepath.Join(elsewhere, "secret", "mp_rank_00_model_states.pt"), filepath.Join(elsewhere, "nothing")} {
		dir := t.TempDir()
		if err := os.Symlink(target, filepath.Join(dir, "global_step100")); err != nil {
			t.Fatal(err)
		}
		h := newHarness(t, dir, Options{Layout: "deepspeed", Logger: zap.NewNop()})
		h.expect(0)
		p := h.w.Pending()
		if len(p) != 1 || !strings.Contains(p[0].Reason, "symbolic link") {
			t.Fatalf("link to %s: pending %+v, want the step waiting as a link", target, p)
		}
		reasons = append(reasons, strings.ReplaceAll(p[0].Reason, target, "TARGET"))
	}
	if reasons[0] != reasons[1] || reasons[1] != reasons[2] {
		t.Fatalf("the waits differ by what the link points at: %q", reasons)
	}
}
