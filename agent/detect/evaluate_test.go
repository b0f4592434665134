package detect

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
)

// harness drives a Watcher's evaluation by hand with a fake clock: each
// eval rescans the disk and evaluates at a chosen time, so settle logic is
// tested without sleeping.
type harness struct {
	t   *testing.T
	w   *Watcher
	dir string
	now time.Time
}

const testSettle = time.Second

func newHarness(t *testing.T, dir string, opts Options) *harness {
	t.Helper()
	opts.Dir = dir
	if opts.Settle == 0 {
		opts.Settle = testSettle
	}
	return &harness{t: t, w: newWatcher(t, opts), dir: dir, now: time.Now()}
}

// events advances the clock, rescans and evaluates.
func (h *harness) events(advance time.Duration) []Event {
	h.t.Helper()
	h.now = h.now.Add(advance)
	if err := h.w.rescan(nil); err != nil {
		h.t.Fatal(err)
	}
	evs, _ := h.w.evaluate(h.now, nil)
	return evs
}

func (h *harness) expect(advance time.Duration, want ...string) []Event {
	h.t.Helper()
	evs := h.events(advance)
	got := []string{}
	for _, ev := range evs {
		got = append(got, fmt.Sprintf("%v %s", ev.Kind, ev.Step.Name()))
	}
	if want == nil {
		want = []string{}
	}
	if !reflect.DeepEqual(got, want) {
		h.t.Fatalf("after %v: events %q, want %q", advance, got, want)
	}
	return evs
}

func TestSettleWindowRestartsOnChange(t *testing.T) {
	dir := copyTree(t, "dcp")
	h := newHarness(t, dir, Options{Layout: "dcp"})
	h.expect(0)
	h.expect(testSettle - time.Millisecond)
	// step_100 grows just before its window ends: the window starts over.
	f, err := os.OpenFile(filepath.Join(dir, "step_100", "__0_0.distcp"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(" more"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	// The coordinator writes .metadata again after the shard (a marker
	// older than the bytes proves nothing).
	write(t, dir, "step_100/.metadata", "metadata again")
	h.expect(time.Millisecond)
	h.expect(testSettle - time.Millisecond)
	evs := h.expect(time.Millisecond, "complete 100")
	if got := evs[0].Step.Files[1].Size; got != int64(len("rank 0 shard more")) {
		t.Errorf("reported size %d, want the grown size", got)
	}
	h.expect(time.Hour) // reported once
}

func TestSettleCountsEvents(t *testing.T) {
	// A file named by an fsnotify event has not settled, even if its size
	// and time look the same (coarse timestamps).
	dir := copyTree(t, "dcp")
	h := newHarness(t, dir, Options{Layout: "dcp"})
	h.expect(0)
	h.now = h.now.Add(testSettle)
	if err := h.w.rescan(nil); err != nil {
		t.Fatal(err)
	}
	evs, next := h.w.evaluate(h.now, map[string]struct{}{"step_100/__1_0.distcp": {}})
	if len(evs) != 0 || !next.Equal(h.now.Add(testSettle)) {
		t.Fatalf("events %v next %v: a touched file must restart the window", evs, next)
	}
	h.expect(testSettle, "complete 100")
}

func TestDCPNeedsMetadata(t *testing.T) {
	dir := copyTree(t, "dcp")
	h := newHarness(t, dir, Options{Layout: "dcp"})
	h.expect(0)
	h.expect(time.Hour, "complete 100")
	h.expect(time.Hour) // step_200 has only .metadata.tmp
	if err := os.Rename(filepath.Join(dir, "step_200", ".metadata.tmp"), filepath.Join(dir, "step_200", ".metadata")); err != nil {
		t.Fatal(err)
	}
	h.expect(0) // the rename is a change: settle again
	evs := h.expect(testSettle, "complete 200")
	want := []string{`step 200 root "step_200"`, "step_200/.metadata", "step_200/__0_0.distcp@0", "step_200/__1_0.distcp@1"}
	if got := describe(evs[0].Step); !reflect.DeepEqual(got, want) {
		t.Errorf("step 200 = %q, want %q", got, want)
	}
}

func TestTempNamesHoldBackAndAreNeverFiles(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "ep0-ba100-rank0.pt", "rank 0")
	write(t, dir, "ep0-ba100-rank1.pt.tmp", "rank 1, still being written")
	write(t, dir, "step_5/.metadata.tmp", "x")
	h := newHarness(t, dir, Options{Layout: "composer"})
	h.expect(0)
	h.expect(time.Hour)
	if err := os.Rename(filepath.Join(dir, "ep0-ba100-rank1.pt.tmp"), filepath.Join(dir, "ep0-ba100-rank1.pt")); err != nil {
		t.Fatal(err)
	}
	h.expect(0)
	evs := h.expect(testSettle, "complete 100")
	for _, f := range evs[0].Step.Files {
		if IsTempName(f.RelPath) {
			t.Errorf("temporary file %s reported", f.RelPath)
		}
	}
	if len(evs[0].Step.Files) != 2 {
		t.Errorf("files %v, want both ranks", evs[0].Step.Files)
	}
}

func TestDeletedSteps(t *testing.T) {
	dir := copyTree(t, "hf")
	h := newHarness(t, dir, Options{Layout: "hf"})
	h.expect(0)
	h.expect(testSettle, "complete 500", "complete 1000")
	// A reported step removed (checkpoint rotation, or the trainer gave
	// up on it): Deleted, with the step as reported.
	if err := os.RemoveAll(filepath.Join(dir, "checkpoint-500")); err != nil {
		t.Fatal(err)
	}
	evs := h.expect(0, "deleted 500")
	if evs[0].Err != nil || len(evs[0].Step.Files) != 7 {
		t.Errorf("deleted event %+v", evs[0])
	}
	// A pending step removed: forgotten without an event.
	if err := os.RemoveAll(filepath.Join(dir, "checkpoint-1500")); err != nil {
		t.Fatal(err)
	}
	h.expect(0)
	if _, ok := h.w.states["1500"]; ok {
		t.Error("state of deleted pending step kept")
	}
	// Recreated, it is a new step.
	write(t, dir, "checkpoint-500/model.safetensors", "again")
	write(t, dir, "checkpoint-500/trainer_state.json", "{}")
	h.expect(0)
	h.expect(testSettle, "complete 500")
}

func TestChangedAfterReport(t *testing.T) {
	dir := copyTree(t, "dcp")
	h := newHarness(t, dir, Options{Layout: "dcp"})
	h.expect(0)
	h.expect(testSettle, "complete 100")
	// The trainer rewrites the step (say it resumed from an earlier one):
	// the report is withdrawn and the new content reported once settled.
	write(t, dir, "step_100/__1_0.distcp", "rewritten rank 1 shard")
	evs := h.expect(0, "deleted 100")
	if !errors.Is(evs[0].Err, ErrChanged) {
		t.Errorf("deleted err = %v, want ErrChanged", evs[0].Err)
	}
	// A late file of a new rank is a change too. Under the old .metadata
	// neither is ever reported: the marker predates them (a re-save in
	// progress, or one killed halfway).
	write(t, dir, "step_100/__2_0.distcp", "rank 2 shard")
	h.expect(testSettle / 2)
	h.expect(testSettle)
	h.expect(time.Hour)
	if p := h.w.Pending(); len(p) != 2 || p[0].Step != 100 || !strings.Contains(p[0].Reason, ".metadata is older than") {
		t.Fatalf("pending %+v, want step 100 waiting for a fresh marker", p)
	}
	// The save completes: the coordinator writes .metadata again.
	write(t, dir, "step_100/.metadata", "new metadata")
	h.expect(0)
	evs = h.expect(testSettle, "complete 100")
	if len(evs[0].Step.Files) != 4 {
		t.Errorf("files %v, want 4", evs[0].Step.Files)
	}
}

// A new watcher over the same folder, as after a restart, reports every
// complete step again: the caller, not the watcher, knows what it
// committed. A step that vanishes later is reported Deleted.
func TestRestartReportsEveryStep(t *testing.T) {
	dir := copyTree(t, "deepspeed")
	h := newHarness(t, dir, Options{Layout: "deepspeed"})
	h.expect(0)
	h.expect(testSettle, "complete 100", "complete 200")
	h2 := newHarness(t, dir, Options{Layout: "deepspeed"})
	h2.expect(0)
	h2.expect(testSettle, "complete 100", "complete 200")
	write(t, dir, "latest", "global_step300")
	h2.expect(0, "complete 300") // its files settled long ago
	if err := os.RemoveAll(filepath.Join(dir, "global_step100")); err != nil {
		t.Fatal(err)
	}
	h2.expect(0, "deleted 100")
}

func TestDeepSpeedLatestNamesLaterStep(t *testing.T) {
	dir := copyTree(t, "deepspeed")
	write(t, dir, "latest", "global_step100")
	age(t, dir)
	h := newHarness(t, dir, Options{Layout: "deepspeed"})
	h.expect(0)
	evs := h.expect(testSettle, "complete 100")
	if g := evs[0].Step.Generated; len(g) != 1 || g[0].RelPath != "latest" || string(g[0].Data) != "global_step100" {
		t.Errorf("generated %q", g)
	}
	write(t, dir, "latest", "global_step300") // 200 was saved meanwhile
	h.expect(0, "complete 200", "complete 300")
}

func TestMegatronTracker(t *testing.T) {
	dir := copyTree(t, "megatron")
	h := newHarness(t, dir, Options{Layout: "megatron"})
	h.expect(0)
	h.expect(testSettle, "complete 100")
	write(t, dir, "latest_checkpointed_iteration.txt", "release")
	h.expect(time.Hour)
	write(t, dir, "latest_checkpointed_iteration.txt", "200\n")
	evs := h.expect(0, "complete 200")
	if g := evs[0].Step.Generated; len(g) != 1 || string(g[0].Data) != "200" {
		t.Errorf("generated %q", g)
	}
}

func TestComposerLatestLinkHoldsRankBack(t *testing.T) {
	dir := copyTree(t, "composer")
	if err := os.Remove(filepath.Join(dir, "ep1-ba200-rank1.pt")); err != nil {
		t.Fatal(err)
	}
	symlink(t, dir, "latest-rank0.pt", "ep1-ba200-rank0.pt")
	symlink(t, dir, "latest-rank1.pt", "ep0-ba100-rank1.pt")
	write(t, dir, "ep1-ba200-rank1.pt", "rank 1 ba200, its link not yet moved")
	age(t, dir)
	h := newHarness(t, dir, Options{Layout: "composer"})
	h.expect(0)
	h.expect(time.Hour, "complete 100")
	symlink(t, dir, "latest-rank1.pt", "ep1-ba200-rank1.pt")
	h.expect(0, "complete 200")
}

func TestExpectedRanks(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "ep0-ba100-rank0.pt", "rank 0")
	h := newHarness(t, dir, Options{Layout: "composer", ExpectedRanks: 2})
	h.expect(0)
	h.expect(time.Hour)
	write(t, dir, "ep0-ba100-rank1.pt", "rank 1")
	h.expect(0)
	h.expect(testSettle, "complete 100")
}

func TestNoMarker(t *testing.T) {
	dir := copyTree(t, "hf")
	h := newHarness(t, dir, Options{Layout: "hf", NoMarker: true})
	h.expect(0)
	h.expect(testSettle, "complete 500", "complete 1000", "complete 1500")
}

// Without a step pattern the flat layout reports each entry as a counted
// step, identified by its name, for the caller to number; a changed entry
// is withdrawn by the same ID and reported again.
func TestFlatCounter(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "a.bin", "a")
	write(t, dir, ".hidden", "never a step")
	h := newHarness(t, dir, Options{Layout: "flat"})
	h.expect(0)
	evs := h.expect(testSettle, "complete name:a.bin")
	if s := evs[0].Step; !s.Counted || s.Number != -1 || s.Files[0].RelPath != "a.bin" {
		t.Errorf("step = %+v, want counted a.bin numbered -1", s)
	}
	write(t, dir, "b.bin.tmp", "b")
	h.expect(time.Hour)
	if err := os.Rename(filepath.Join(dir, "b.bin.tmp"), filepath.Join(dir, "b.bin")); err != nil {
		t.Fatal(err)
	}
	h.expect(0)
	h.expect(testSettle, "complete name:b.bin")
	write(t, dir, "a.bin", "a, rewritten")
	evs = h.expect(0, "deleted name:a.bin")
	if !errors.Is(evs[0].Err, ErrChanged) || !strings.Contains(evs[0].Err.Error(), "step name:a.bin") {
		t.Errorf("deleted: %v, want a change of step name:a.bin", evs[0].Err)
	}
	h.expect(testSettle, "complete name:a.bin")
}

func TestOverflowRescans(t *testing.T) {
	dir := t.TempDir()
	w := newWatcher(t, Options{Dir: dir, Layout: "dcp", Settle: testSettle})
	out := make(chan Event, 10)
	l := &loop{w: w, ctx: t.Context(), out: out, dirty: map[string]struct{}{},
		debounce: stoppedTimer(), settle: stoppedTimer()}
	if err := l.rescanAndEvaluate(); err != nil {
		t.Fatal(err)
	}
	// Written while fsnotify's queue overflowed: no event ever names it.
	write(t, dir, "step_7/__0_0.distcp", "shard")
	write(t, dir, "step_7/.metadata", "md")
	if err := l.fsnotifyError(fsnotify.ErrEventOverflow); err != nil {
		t.Fatal(err)
	}
	st := w.states["7"]
	if st == nil || st.due.IsZero() {
		t.Fatalf("overflow rescan did not find step 7 (state %+v)", st)
	}
	evs, _ := w.evaluate(st.due, nil)
	if len(evs) != 1 || evs[0].Kind != Complete || evs[0].Step.Number != 7 {
		t.Fatalf("events %v", evs)
	}
}

func TestSymlinks(t *testing.T) {
	dir := copyTree(t, "hf")
	outside := t.TempDir()
	write(t, outside, "tokenizer.json", "{}")
	ck := "checkpoint-500"
	symlink(t, dir, ck+"/tokenizer.json", filepath.Join(outside, "tokenizer.json")) // outside: skipped
	symlink(t, dir, ck+"/escape", "../../"+filepath.Base(outside)+"/tokenizer.json")
	symlink(t, dir, ck+"/weights.safetensors", "model.safetensors")                // inside: kept
	symlink(t, dir, ck+"/abs.safetensors", filepath.Join(dir, ck, "optimizer.pt")) // absolute inside: rewritten
	symlink(t, dir, ck+"/dangling", "gone.pt")                                     // dangling: skipped
	symlink(t, dir, ck+"/parent", "..")                                            // the root itself: skipped
	if err := os.Mkdir(filepath.Join(outside, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, outside, "sub/secret.pt", "not ours")
	symlink(t, dir, ck+"/linkdir", filepath.Join(outside, "sub")) // never descended into
	symlink(t, dir, "best", ck+"/model.safetensors")              // in the root, pointing into the step
	w := newWatcher(t, Options{Dir: dir, Layout: "hf"})
	steps, err := w.Scan()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, l := range steps[0].Symlinks {
		got = append(got, l.RelPath+" -> "+l.Target)
	}
	want := []string{
		"best -> checkpoint-500/model.safetensors",
		"checkpoint-500/abs.safetensors -> optimizer.pt",
		"checkpoint-500/weights.safetensors -> model.safetensors",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("links %q, want %q", got, want)
	}
	for _, f := range steps[0].Files {
		if strings.Contains(f.RelPath, "secret") || strings.Contains(f.RelPath, "linkdir") {
			t.Errorf("followed a link out of the root: %s", f.RelPath)
		}
	}
}

func TestUnreadableFileIsAnErrorEvent(t *testing.T) {
	dir := copyTree(t, "dcp")
	h := newHarness(t, dir, Options{Layout: "dcp"})
	denied := true
	h.w.openCheck = func(abs string) error {
		if denied && filepath.Base(abs) == "__1_0.distcp" && strings.Contains(abs, "step_100") {
			return &fs.PathError{Op: "open", Path: abs, Err: fs.ErrPermission}
		}
		return nil
	}
	h.expect(0)
	evs := h.expect(testSettle, "error 100")
	if !errors.Is(evs[0].Err, fs.ErrPermission) {
		t.Errorf("err = %v, want permission denied", evs[0].Err)
	}
	h.expect(time.Hour) // the same error is not repeated
	denied = false
	h.expect(0, "complete 100")
}

func TestPermissionDeniedOnDisk(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root reads files whatever their mode; TestUnreadableFileIsAnErrorEvent injects the failure instead")
	}
	dir := copyTree(t, "dcp")
	write(t, dir, "step_300/__0_0.distcp", "shard")
	write(t, dir, "step_300/.metadata", "md")
	write(t, dir, "step_300/extra/notes", "unlistable")
	age(t, dir)
	p := filepath.Join(dir, "step_100", "__1_0.distcp")
	sub := filepath.Join(dir, "step_300", "extra")
	for _, x := range []string{p, sub} {
		if err := os.Chmod(x, 0); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		os.Chmod(p, 0o644)
		os.Chmod(sub, 0o755)
	})
	h := newHarness(t, dir, Options{Layout: "dcp"})
	h.expect(0)
	evs := h.expect(testSettle, "error 100", "error 300")
	for _, ev := range evs {
		if !errors.Is(ev.Err, fs.ErrPermission) {
			t.Errorf("step %d: err = %v, want permission denied", ev.Step.Number, ev.Err)
		}
	}
}

// With ReportWriting, a step still being written is reported Writing each
// time its files change (with its files as they are), never while nothing
// changes, and Deleted if it vanishes before it is complete.
func TestWritingEvents(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "step_100/__0_0.distcp", "rank 0, part written")
	h := newHarness(t, dir, Options{Layout: "dcp", ReportWriting: true})
	evs := h.expect(0, "writing 100")
	if f := evs[0].Step.Files; len(f) != 1 || f[0].Size != 20 || f[0].LocalPath != filepath.Join(dir, "step_100/__0_0.distcp") {
		t.Errorf("files %+v", f)
	}
	h.expect(time.Second)
	write(t, dir, "step_100/__0_0.distcp", "rank 0, more of it written")
	evs = h.expect(time.Second, "writing 100")
	if f := evs[0].Step.Files; len(f) != 1 || f[0].Size != 26 {
		t.Errorf("files %+v, want the new size", f)
	}
	if err := os.RemoveAll(filepath.Join(dir, "step_100")); err != nil {
		t.Fatal(err)
	}
	h.expect(0, "deleted 100")
	write(t, dir, "step_200/__0_0.distcp", "rank 0")
	h.expect(0, "writing 200")
	write(t, dir, "step_200/.metadata", "md")
	h.expect(0, "writing 200")
	h.expect(testSettle, "complete 200")
	h2 := newHarness(t, dir, Options{Layout: "dcp"})
	h2.expect(0) // off by default
}
