package detect

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// dsRecordsDir holds DeepSpeed-shaped steps saved by torch 2.6
// (testdata/deepspeed-records/gen.py).
const dsRecordsDir = "../../testdata/deepspeed-records"

// copyDS copies the saved tree name into a fresh folder, its files dated
// an hour back and latest a second newer (rank 0 writes it last), and
// returns the folder.
func copyDS(t *testing.T, name string) string {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join(dsRecordsDir, name)
	old := time.Now().Add(-time.Hour)
	err := filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		out := filepath.Join(dir, rel)
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
		when := old
		if d.Name() == deepspeedLatest {
			when = old.Add(time.Second)
		}
		return os.Chtimes(out, when, when)
	})
	if err != nil {
		t.Fatal(err)
	}
	setTime(t, filepath.Join(dir, "global_step100"), old)
	return dir
}

// TestDeepSpeedRecordImpliesFiles: with latest fresh, a step is held
// while a file rank 0's model states record implies is missing, and the
// reason names the file, what was expected and what was found. Before
// the record was read, a ZeRO-1/2 step missing another rank's optimizer
// file, or another model-parallel rank's model states, was complete.
func TestDeepSpeedRecordImpliesFiles(t *testing.T) {
	const gs = "global_step100/"
	cases := []struct {
		tree, remove string
		nodes        int
		held         string // "" for complete
	}{
		{tree: "zero2-dp4"},
		{tree: "zero2-dp4", remove: "zero_pp_rank_3_mp_rank_00_optim_states.pt",
			held: "record: global_step100/zero_pp_rank_3_mp_rank_00_optim_states.pt is not here (expected: present, of any size, as DeepSpeed records no sizes; found: nothing): global_step100/mp_rank_00_model_states.pt records dp_world_size 4 and mp_world_size 1"},
		{tree: "zero2-dp4", remove: "zero_pp_rank_1_mp_rank_00_optim_states.pt", held: gs + "zero_pp_rank_1_mp_rank_00_optim_states.pt is not here"},
		{tree: "zero2-dp4", remove: "zero_pp_rank_3_mp_rank_00_optim_states.pt", nodes: 2},
		{tree: "bf16-zero1-dp2-mp2"},
		{tree: "bf16-zero1-dp2-mp2", remove: "mp_rank_01_model_states.pt", held: gs + "mp_rank_01_model_states.pt is not here"},
		{tree: "bf16-zero1-dp2-mp2", remove: "bf16_zero_pp_rank_1_mp_rank_01_optim_states.pt",
			held: gs + "bf16_zero_pp_rank_1_mp_rank_01_optim_states.pt is not here (expected: present, of any size, as DeepSpeed records no sizes; found: nothing): global_step100/mp_rank_00_model_states.pt records dp_world_size 2 and mp_world_size 2"},
		{tree: "bf16-zero1-dp2-mp2", remove: "mp_rank_00_model_states.pt", held: "record: global_step100/mp_rank_00_model_states.pt (rank 0's model states, written before latest) is not here"},
		{tree: "zero3-dp2"},
		// ZeRO-3: the optimizer file of a rank with model states is
		// zeroHeld's (unchanged); the record adds a rank with neither.
		{tree: "zero3-dp2", remove: "zero_pp_rank_1_mp_rank_00_optim_states.pt", held: "optimizer states not written yet for zero_pp_rank_1_mp_rank_00"},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s-%s-%d", tc.tree, tc.remove, tc.nodes), func(t *testing.T) {
			dir := copyDS(t, tc.tree)
			if tc.remove != "" {
				if err := os.Remove(filepath.Join(dir, "global_step100", tc.remove)); err != nil {
					t.Fatal(err)
				}
				setTime(t, filepath.Join(dir, "global_step100"), time.Now().Add(-time.Hour))
			}
			c := candidates(t, Options{Dir: dir, Layout: "deepspeed", Nodes: tc.nodes})[100]
			if !c.Finished {
				t.Fatalf("latest fresh and naming the step: not finished (%s)", c.Waiting)
			}
			if tc.held == "" && c.Held != "" || !strings.Contains(c.Held, tc.held) {
				t.Fatalf("held %q, want %q", c.Held, tc.held)
			}
		})
	}
}

// TestDeepSpeedRecordUnreadable: model states that are not a torch.save
// zip fall back to the latest file's rules (the step is complete without
// the rank the record would have implied), with one warning per version.
func TestDeepSpeedRecordUnreadable(t *testing.T) {
	dir := copyDS(t, "zero2-dp4")
	model := filepath.Join(dir, "global_step100", "mp_rank_00_model_states.pt")
	write(t, dir, "global_step100/mp_rank_00_model_states.pt", strings.Repeat("not a zip ", 100))
	if err := os.Remove(filepath.Join(dir, "global_step100", "zero_pp_rank_3_mp_rank_00_optim_states.pt")); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	setTime(t, model, old)
	setTime(t, filepath.Join(dir, "global_step100"), old)
	core, logs := observer.New(zapcore.WarnLevel)
	opts := Options{Dir: dir, Layout: "deepspeed", Logger: zap.New(core)}
	w := newWatcher(t, opts)
	e, err := newEngine(w.opts, w.openCheck)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := e.rescan(nil); err != nil {
			t.Fatal(err)
		}
		cs := e.candidates()
		if len(cs) != 1 || !cs[0].Finished || cs[0].Held != "" {
			t.Fatalf("unreadable record: %+v, want the step complete by the latest rules", cs)
		}
	}
	warned := logs.FilterMessageSnippet("not read as a record").All()
	if len(warned) != 1 {
		t.Fatalf("%d warnings over 3 evaluations, want 1: %v", len(warned), logs.All())
	}
	if f := fmt.Sprint(warned[0].ContextMap()["file"]); f != "global_step100/mp_rank_00_model_states.pt" {
		t.Errorf("warning names %q", f)
	}
}
