package detect

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func TestScanLayouts(t *testing.T) {
	tests := []struct {
		tree    string
		layout  string
		opts    Options
		prepare func(t *testing.T, dir string)
		want    [][]string
	}{
		{
			tree: "composer", layout: "composer",
			prepare: func(t *testing.T, dir string) {
				symlink(t, dir, "latest-rank0.pt", "ep1-ba200-rank0.pt")
				symlink(t, dir, "latest-rank1.pt", "ep1-ba200-rank1.pt")
			},
			want: [][]string{
				{`step 100 root ""`, "ep0-ba100-rank0.pt@0", "ep0-ba100-rank1.pt@1",
					"latest-rank0.pt -> ep0-ba100-rank0.pt", "latest-rank1.pt -> ep0-ba100-rank1.pt"},
				{`step 200 root ""`, "ep1-ba200-rank0.pt@0", "ep1-ba200-rank1.pt@1",
					"latest-rank0.pt -> ep1-ba200-rank0.pt", "latest-rank1.pt -> ep1-ba200-rank1.pt"},
			},
		},
		{
			tree: "composer-sharded", layout: "composer",
			prepare: func(t *testing.T, dir string) {
				symlink(t, dir, "latest-rank0.pt", "ep0-ba300")
			},
			want: [][]string{
				{`step 300 root "ep0-ba300"`, "ep0-ba300/.metadata", "ep0-ba300/__0_0.distcp@0", "ep0-ba300/__1_0.distcp@1",
					"latest-rank0.pt -> ep0-ba300"},
			},
		},
		{
			tree: "dcp", layout: "dcp",
			want: [][]string{
				{`step 100 root "step_100"`, "step_100/.metadata", "step_100/__0_0.distcp@0", "step_100/__1_0.distcp@1"},
			},
		},
		{
			tree: "deepspeed", layout: "deepspeed",
			want: [][]string{
				{`step 100 root "global_step100"`, "global_step100/mp_rank_00_model_states.pt",
					"global_step100/zero_pp_rank_0_mp_rank_00_optim_states.pt@0",
					"global_step100/zero_pp_rank_1_mp_rank_00_optim_states.pt@1",
					"latest = global_step100"},
				{`step 200 root "global_step200"`, "global_step200/mp_rank_00_model_states.pt",
					"global_step200/zero_pp_rank_0_mp_rank_00_optim_states.pt@0",
					"global_step200/zero_pp_rank_1_mp_rank_00_optim_states.pt@1",
					"latest = global_step200"},
			},
		},
		{
			tree: "megatron", layout: "megatron",
			want: [][]string{
				{`step 100 root "iter_0000100"`, "iter_0000100/mp_rank_00/model_optim_rng.pt@0",
					"iter_0000100/mp_rank_01/model_optim_rng.pt@1",
					"latest_checkpointed_iteration.txt = 100"},
			},
		},
		{
			tree: "hf", layout: "hf",
			want: [][]string{
				{`step 500 root "checkpoint-500"`, "checkpoint-500/config.json", "checkpoint-500/model.safetensors",
					"checkpoint-500/optimizer.pt", "checkpoint-500/rng_state.pth", "checkpoint-500/scheduler.pt",
					"checkpoint-500/trainer_state.json", "checkpoint-500/training_args.bin"},
				{`step 1000 root "checkpoint-1000"`, "checkpoint-1000/config.json", "checkpoint-1000/model.safetensors",
					"checkpoint-1000/optimizer.pt", "checkpoint-1000/rng_state_0.pth@0", "checkpoint-1000/rng_state_1.pth@1",
					"checkpoint-1000/scheduler.pt", "checkpoint-1000/trainer_state.json", "checkpoint-1000/training_args.bin"},
			},
		},
		{
			tree: "flat", layout: "flat", opts: Options{StepPattern: `^model-(\d+)\.pt$`},
			want: [][]string{
				{`step 100 root ""`, "model-100.pt"},
				{`step 200 root ""`, "model-200.pt"},
			},
		},
		{
			tree: "flat", layout: "flat", opts: Options{StepPattern: `-(\d+)`},
			want: [][]string{
				{`step 100 root ""`, "model-100.pt"},
				{`step 200 root ""`, "eval-200/scores.json", "model-200.pt"},
			},
		},
		{
			tree: "flat", layout: "flat",
			want: [][]string{
				{`step name:eval-200 root "eval-200"`, "eval-200/scores.json"},
				{`step name:model-100.pt root ""`, "model-100.pt"},
				{`step name:model-200.pt root ""`, "model-200.pt"},
				{`step name:notes.txt root ""`, "notes.txt"},
			},
		},
	}
	for _, tt := range tests {
		for _, layout := range []string{tt.layout, "auto"} {
			if layout == "auto" && tt.layout == "flat" {
				continue // auto never picks flat
			}
			t.Run(tt.tree+"/"+layout, func(t *testing.T) {
				dir := copyTree(t, tt.tree)
				if tt.prepare != nil {
					tt.prepare(t, dir)
				}
				opts := tt.opts
				opts.Dir, opts.Layout = dir, layout
				w := newWatcher(t, opts)
				steps, err := w.Scan()
				if err != nil {
					t.Fatal(err)
				}
				if got := describeAll(steps); !reflect.DeepEqual(got, tt.want) {
					t.Errorf("steps:\n got %q\nwant %q", got, tt.want)
				}
				if layout == "auto" {
					if got := effectiveName(mustLayout(t, w)); got != tt.layout {
						t.Errorf("auto picked %q, want %q", got, tt.layout)
					}
				}
			})
		}
	}
}

// mustLayout returns the layout a Scan picked: Scan uses its own engine, so
// run the auto choice on the watcher's engine as Run would.
func mustLayout(t *testing.T, w *Watcher) Layout {
	t.Helper()
	if err := w.rescan(nil); err != nil {
		t.Fatal(err)
	}
	w.layout.Recognize(w.tree)
	return w.layout
}

func TestRankOf(t *testing.T) {
	tests := map[string]int{
		"ep0-ba100-rank3.pt":                             3,
		"step_1/__12_0.distcp":                           12,
		"zero_pp_rank_5_mp_rank_00_optim_states.pt":      5,
		"bf16_zero_pp_rank_2_mp_rank_00_optim_states.pt": 2,
		"ckpt/rng_state_7.pth":                           7,
		"iter_0000100/mp_rank_03/model_optim_rng.pt":     3,
		"checkpoint_4/random_states_6.pkl":               6,
	}
	for p, want := range tests {
		if got := RankOf(p); got == nil || *got != want {
			t.Errorf("RankOf(%q) = %v, want %d", p, got, want)
		}
	}
	for _, p := range []string{
		"global_step1/mp_rank_00_model_states.pt",
		"zero_pp_rank_1_mp_rank_01_optim_states.pt",
		"iter_0000100/mp_rank_00_001/model_optim_rng.pt",
		"checkpoint-5/rng_state.pth",
		"checkpoint_4/random_states.pkl", "random_states_1.pt",
		".metadata", "latest", "frank3.pt",
	} {
		if got := RankOf(p); got != nil {
			t.Errorf("RankOf(%q) = %d, want nil", p, *got)
		}
	}
}

func TestIsTempName(t *testing.T) {
	for _, n := range []string{".metadata.tmp", "x.pt.tmp", "a.temp", "b.partial", "c~", "ckpt-unfinished", "tmp-checkpoint-5"} {
		if !IsTempName(n) {
			t.Errorf("IsTempName(%q) = false", n)
		}
	}
	for _, n := range []string{"tmp-4242", "tmp_step_100", "tmpab12cd9x", "tmp.Xa81kQ2bZ0", ".tmp-step-100", "temp-100", "TMP-7"} {
		if !IsTempName(n) {
			t.Errorf("IsTempName(%q) = false", n)
		}
	}
	for _, n := range []string{".metadata", "tmp.pt", "latest", "checkpoint-5", "template.json", "temperature.pt", "step-100"} {
		if IsTempName(n) {
			t.Errorf("IsTempName(%q) = true", n)
		}
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	for _, o := range []Options{
		{},
		{Dir: ".", Layout: "orbax"},
		{Dir: ".", Layout: "flat", StepPattern: "("},
		{Dir: ".", ExpectedRanks: -1},
	} {
		if _, err := New(o); err == nil {
			t.Errorf("New(%+v) accepted", o)
		}
	}
}

// A DCP step is a folder whose whole name is a step name: temporary
// folders carry digits too, and are never steps.
func TestDCPStepName(t *testing.T) {
	for name, want := range map[string]int64{
		"step-100": 100, "step_100": 100, "step100": 100, "global_step100": 100, "iter_0000100": 100,
		"checkpoint-100": 100, "ckpt_100": 100, "epoch_3": 3, "100": 100, "Step-7": 7,
		"megatron_gpt--val_loss=2.35-step=100-consumed_samples=3200.0":      100,
		"megatron_gpt--val_loss=2.35-step=100-consumed_samples=3200.0-last": 100,
	} {
		if got, ok := DCPStepName(name); !ok || got != want {
			t.Errorf("DCPStepName(%q) = %d, %v; want %d", name, got, ok, want)
		}
	}
	for _, name := range []string{"tmp-4242", "tmpab12cd9", "tmp_100", "run-7-backup", "abc9", "step-100-old", "consumed_samples=3200.0"} {
		if got, ok := DCPStepName(name); ok {
			t.Errorf("DCPStepName(%q) = %d, want no step", name, got)
		}
	}
}

// A step written into a temporary folder and renamed when done is reported
// under its final name only; OLMo's nested folders and NeMo's names and
// "-last" copies are steps.
func TestDCPTempFoldersAndNestedLayouts(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "tmp-4242/__0_0.distcp", "r0")
	write(t, dir, "tmp-4242/.metadata", "md")
	write(t, dir, "tmpab12cd9/__0_0.distcp", "r0")
	write(t, dir, "tmpab12cd9/.metadata", "md")
	write(t, dir, "step20/model_and_optim/__0_0.distcp", "r0")
	write(t, dir, "step20/model_and_optim/.metadata", "md")
	write(t, dir, "step20/config.yaml", "cfg")
	nemo := "gpt--val_loss=2.35-step=30-consumed_samples=960.0"
	write(t, dir, nemo+"/weights/__0_0.distcp", "r0")
	write(t, dir, nemo+"/weights/.metadata", "md")
	write(t, dir, nemo+"-last/weights/__0_0.distcp", "r0")
	write(t, dir, nemo+"-last/weights/.metadata", "md")
	age(t, dir)
	h := newHarness(t, dir, Options{Layout: "auto"})
	h.expect(0)
	evs := h.expect(testSettle, "complete 20", "complete 30")
	if got := len(evs[1].Step.Files); got != 4 || evs[1].Step.Root != "" {
		t.Errorf("NeMo step with its -last copy: root %q, %d files, want both folders' 4", evs[1].Step.Root, got)
	}
	if err := os.Rename(filepath.Join(dir, "tmp-4242"), filepath.Join(dir, "step-40")); err != nil {
		t.Fatal(err)
	}
	h.expect(0)
	h.expect(testSettle, "complete 40")
}
