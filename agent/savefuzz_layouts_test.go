package agent

import (
	"fmt"
	"strconv"

	"github.com/ferrylabs/ferry/agent/detect"
	"github.com/ferrylabs/ferry/manifest"
)

// fuzzLayout is one framework's save habits, as the fuzzer generates them.
type fuzzLayout struct {
	name string
	// dir is step n's folder ("" for the single layout's root files).
	dir func(n int64) string
	// save writes step n the way the framework does, marker last where
	// it has one.
	save func(f *fz, n int64)
	// cleanup deletes part of a saved step to save disk space (an
	// optimizer state), or nothing when the layout has no such habit.
	cleanup func(f *fz, n int64)
	// generated are paths a restore adds that are not the trainer's
	// files of the step (pointers rebuilt per step).
	generated map[string]bool
	// options sets what the layout needs beyond the agent's defaults
	// (flat: --layout flat, a --step-pattern); nil for none.
	options func(o *detect.Options)
	// files, when set, gives step n's files on disk where they are not
	// one folder (Composer's per-rank files in the root).
	files func(f *fz, n int64) fileState
	// removeStep deletes step n whole (nil: its folder).
	removeStep func(f *fz, n int64)
	// key names step n for the oracle and keyOf a manifest's step (nil:
	// the number; counted flat steps have no number of their own).
	key   func(n int64) string
	keyOf func(m *manifest.Manifest) string
	// single marks a layout whose versions are the root's checkpoint
	// files (the oracle's "single" rules), besides the layout so named.
	single bool
}

func (l fuzzLayout) isSingle() bool { return l.name == "single" || l.single }

// state is step n's files on disk, empty when it is gone.
func (l fuzzLayout) state(f *fz, n int64) fileState {
	if l.files != nil {
		return l.files(f, n)
	}
	if d := l.dir(n); d != "" && !f.exists(d) {
		return fileState{}
	}
	return f.snapshot(l.dir(n))
}

// onDisk reports whether step n has files on disk (the single layout's
// folder always counts).
func (l fuzzLayout) onDisk(f *fz, n int64) bool {
	return l.isSingle() || len(l.state(f, n)) > 0
}

func (l fuzzLayout) remove(f *fz, n int64) {
	if l.removeStep != nil {
		l.removeStep(f, n)
		return
	}
	f.remove(l.dir(n))
}

func (l fuzzLayout) stepKey(n int64) string {
	if l.key != nil {
		return l.key(n)
	}
	return strconv.FormatInt(n, 10)
}

func (l fuzzLayout) manifestKey(m *manifest.Manifest) string {
	switch {
	case l.isSingle():
		return "single"
	case l.keyOf != nil:
		return l.keyOf(m)
	}
	return strconv.FormatInt(m.Step, 10)
}

func fuzzLayouts() []fuzzLayout {
	return []fuzzLayout{
		{
			name: "dcp", dir: func(n int64) string { return fmt.Sprintf("step-%d", n) },
			save: saveDCP, cleanup: func(f *fz, n int64) { f.remove(fmt.Sprintf("step-%d/__0_0.distcp", n)) },
		},
		{
			name: "hf", dir: func(n int64) string { return fmt.Sprintf("checkpoint-%d", n) },
			save: saveHF, cleanup: func(f *fz, n int64) { f.remove(fmt.Sprintf("checkpoint-%d/optimizer.pt", n)) },
		},
		{
			name: "deepspeed", dir: func(n int64) string { return fmt.Sprintf("global_step%d", n) },
			save: saveDeepSpeed, generated: map[string]bool{"latest": true},
			cleanup: func(f *fz, n int64) {
				f.remove(fmt.Sprintf("global_step%d/zero_pp_rank_0_mp_rank_00_optim_states.pt", n))
			},
		},
		{
			name: "megatron", dir: func(n int64) string { return fmt.Sprintf("iter_%07d", n) },
			save: saveMegatron, generated: map[string]bool{"latest_checkpointed_iteration.txt": true},
			cleanup: func(f *fz, n int64) { f.remove(fmt.Sprintf("iter_%07d/mp_rank_00/distrib_optim.pt", n)) },
		},
		{
			name: "single", dir: func(int64) string { return "" },
			save: saveSingle, cleanup: func(f *fz, _ int64) { f.remove("model_best.pth.tar") },
		},
		composerFuzzLayout(),
		flatFuzzLayout(),
		flatCounterFuzzLayout(),
		nemoFuzzLayout(),
		lightningFuzzLayout(),
	}
}

// saveDCP: ranks write __R_0.distcp in place, the coordinator writes
// .metadata.tmp and renames it; sometimes the whole step is written in a
// temporary folder renamed into place at the end.
func saveDCP(f *fz, n int64) {
	dir := fmt.Sprintf("step-%d", n)
	w := dir
	if !f.exists(dir) && f.rng.Intn(4) == 0 {
		w = fmt.Sprintf("tmp-%d", 1000+f.rng.Intn(9000))
	}
	for _, r := range f.ranks() {
		f.file(fmt.Sprintf("%s/__%d_0.distcp", w, r))
		f.sleep(f.gap())
	}
	f.dcpRecord(w)
	if w != dir {
		f.rename(w, dir)
	}
	if !f.dead {
		f.completed(strconv.FormatInt(n, 10), dir)
	}
}

// saveHF: the Trainer's main process saves the model, optimizer, scheduler
// and its RNG state, then trainer_state.json; other ranks' RNG states may
// land after it.
func saveHF(f *fz, n int64) {
	dir := fmt.Sprintf("checkpoint-%d", n)
	ranks := f.ranks()
	f.file(dir + "/model.safetensors")
	f.file(dir + "/optimizer.pt")
	f.file(dir + "/scheduler.pt")
	rng := func(r int) string {
		if len(ranks) == 1 {
			return dir + "/rng_state.pth"
		}
		return fmt.Sprintf("%s/rng_state_%d.pth", dir, r)
	}
	late := []int{}
	if f.rng.Intn(3) == 0 {
		// transformers <= 4.35: trainer_state.json, then every process's
		// RNG state (Trainer._save_checkpoint).
		for r := range len(ranks) {
			late = append(late, r)
		}
	} else {
		f.file(rng(0))
		for r := 1; r < len(ranks); r++ {
			if f.rng.Intn(2) == 0 {
				f.file(rng(r))
			} else {
				late = append(late, r)
			}
		}
	}
	f.text(dir+"/trainer_state.json", fmt.Sprintf(`{"global_step": %d, "nonce": %d}`, n, f.rng.Int63()))
	for _, r := range late {
		f.sleep(f.gap())
		f.file(rng(r))
	}
	if !f.dead {
		f.completed(strconv.FormatInt(n, 10), dir)
	}
}

// saveDeepSpeed: each rank saves its files, rank 0 rewrites latest after
// its own, before other ranks may be done.
func saveDeepSpeed(f *fz, n int64) {
	dir := fmt.Sprintf("global_step%d", n)
	ranks := f.ranks()
	f.file(dir + "/mp_rank_00_model_states.pt")
	f.file(dir + "/zero_pp_rank_0_mp_rank_00_optim_states.pt")
	late := []int{}
	for r := 1; r < len(ranks); r++ {
		if f.rng.Intn(2) == 0 {
			f.file(fmt.Sprintf("%s/zero_pp_rank_%d_mp_rank_00_optim_states.pt", dir, r))
		} else {
			late = append(late, r)
		}
	}
	f.text("latest", dir)
	for _, r := range late {
		f.sleep(f.gap())
		f.file(fmt.Sprintf("%s/zero_pp_rank_%d_mp_rank_00_optim_states.pt", dir, r))
	}
	if !f.dead {
		f.completed(strconv.FormatInt(n, 10), dir)
	}
}

// saveMegatron: every tensor-parallel rank writes its folder, rank 0
// rewrites the tracker after a barrier.
func saveMegatron(f *fz, n int64) {
	dir := fmt.Sprintf("iter_%07d", n)
	for _, r := range f.ranks() {
		f.file(fmt.Sprintf("%s/mp_rank_%02d/model_optim_rng.pt", dir, r))
		if r == 0 {
			f.file(dir + "/mp_rank_00/distrib_optim.pt")
		}
		f.sleep(f.gap())
	}
	f.text("latest_checkpointed_iteration.txt", strconv.FormatInt(n, 10))
	if !f.dead {
		f.completed(strconv.FormatInt(n, 10), dir)
	}
}

// saveSingle: torch.save of one checkpoint file, in place or through a
// temporary name and os.replace, sometimes copied to model_best (the
// ImageNet example); every state between whole files is one the trainer
// had.
func saveSingle(f *fz, n int64) {
	c, p := f.chunks()
	if f.rng.Intn(2) == 0 {
		f.write("checkpoint.pth.tar", f.size(), c, p)
	} else {
		f.write("checkpoint.pth.tar.tmp", f.size(), c, p)
		f.rename("checkpoint.pth.tar.tmp", "checkpoint.pth.tar")
	}
	// A version is made of the files that are whole: a kill leaves the
	// others (what the trainer has on disk that is a checkpoint at all).
	f.completed("single", "")
	if f.dead {
		return
	}
	if f.rng.Intn(2) == 0 {
		f.sleep(f.gap())
		f.copyFile("checkpoint.pth.tar", "model_best.pth.tar")
		f.completed("single", "")
	}
	_ = n
}
