package detect

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// recordsDir holds real torch 2.6 DCP saves (testdata/dcp-records/gen.py).
const recordsDir = "../../testdata/dcp-records"

// copyRecord copies the torch save src into dir/rel, dated an hour back,
// with .metadata a second newer than the storage files (as written).
func copyRecord(t *testing.T, src, dir, rel string) {
	t.Helper()
	from := filepath.Join(recordsDir, src)
	to := filepath.Join(dir, filepath.FromSlash(rel))
	if err := os.MkdirAll(to, 0o755); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	for _, e := range ents {
		data, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(to, e.Name())
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		when := old
		if e.Name() == dcpMetadata {
			when = old.Add(time.Second)
		}
		if err := os.Chtimes(p, when, when); err != nil {
			t.Fatal(err)
		}
	}
	setTime(t, to, old.Add(time.Second))
}

func setTime(t *testing.T, p string, when time.Time) {
	t.Helper()
	if err := os.Chtimes(p, when, when); err != nil {
		t.Fatal(err)
	}
}

// candidates evaluates dir once, as the watcher does, and returns its
// candidates by step.
func candidates(t *testing.T, opts Options) map[int64]Candidate {
	t.Helper()
	if opts.Layout == "" {
		opts.Layout = "dcp"
	}
	w := newWatcher(t, opts)
	e, err := newEngine(w.opts, w.openCheck)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.rescan(nil); err != nil {
		t.Fatal(err)
	}
	out := map[int64]Candidate{}
	for _, c := range e.candidates() {
		out[c.Step.Number] = c
	}
	return out
}

func expectOf(c Candidate) map[string]int64 {
	out := map[string]int64{}
	for _, e := range c.Step.Expect {
		out[e.RelPath] = e.Size
	}
	return out
}

// TestDCPRecordSpecifiesStep: a real torch save is complete with its
// record's expectations; one named file cut short (its time put back, so
// that no timing rule sees it) or missing is not, and the reason names the
// file, the size found and the size recorded.
func TestDCPRecordSpecifiesStep(t *testing.T) {
	dir := t.TempDir()
	copyRecord(t, "world4-threads2", dir, "step-100")
	c := candidates(t, Options{Dir: dir})[100]
	if !c.Finished || c.Proof != ProofMarker {
		t.Fatalf("whole torch save: finished %v (%s), proof %v", c.Finished, c.Waiting, c.Proof)
	}
	exp := expectOf(c)
	if len(exp) != 6 || exp["step-100/__2_0.distcp"] != 2556 || exp["step-100/__1_1.distcp"] != 1180 {
		t.Fatalf("expectations %v, want the record's 6 files", exp)
	}

	shard := filepath.Join(dir, "step-100", "__2_0.distcp")
	st, _ := os.Stat(shard)
	if err := os.Truncate(shard, 1278); err != nil {
		t.Fatal(err)
	}
	setTime(t, shard, st.ModTime())
	c = candidates(t, Options{Dir: dir})[100]
	want := "record: step-100/__2_0.distcp is 1278 bytes, step-100/.metadata records 2556"
	if c.Finished || !strings.Contains(c.Waiting, want) {
		t.Fatalf("torn shard: finished %v, waiting %q; want %q", c.Finished, c.Waiting, want)
	}

	if err := os.Remove(shard); err != nil {
		t.Fatal(err)
	}
	setTime(t, filepath.Join(dir, "step-100"), st.ModTime())
	c = candidates(t, Options{Dir: dir})[100]
	want = "record: step-100/.metadata names step-100/__2_0.distcp (2556 bytes), which is not here"
	if c.Finished || c.Waiting != want {
		t.Fatalf("missing shard: finished %v, waiting %q; want %q", c.Finished, c.Waiting, want)
	}
	// On a node of a multi-node job the missing file is another node's:
	// the step is this node's part, and the expectation goes to the merge.
	c = candidates(t, Options{Dir: dir, Nodes: 2})[100]
	if !c.Finished || expectOf(c)["step-100/__2_0.distcp"] != 2556 {
		t.Fatalf("multi-node part without another node's shard: finished %v (%s), expect %v", c.Finished, c.Waiting, expectOf(c))
	}
}

// TestDCPRecordNeMo: NeMo 2's save order (weights/.metadata, then
// weights/metadata.json and context/ after it, an "-unfinished" file
// beside the folder until the end) is complete once the marker is gone,
// though files were written after .metadata; the files outside the DCP
// folder make the proof the settle window, not the marker.
func TestDCPRecordNeMo(t *testing.T) {
	dir := t.TempDir()
	name := "model--reduced_train_loss=1.23-epoch=0-step=100"
	copyRecord(t, "world2", dir, name+"/weights")
	later := time.Now().Add(-30 * time.Minute)
	for _, f := range []string{"weights/metadata.json", "context/model.yaml", "context/io.json"} {
		write(t, dir, name+"/"+f, "{}")
		setTime(t, filepath.Join(dir, name, f), later)
	}
	write(t, dir, name+"-unfinished", "")
	c := candidates(t, Options{Dir: dir})[100]
	if c.Finished || !strings.Contains(c.Waiting, name+"-unfinished") {
		t.Fatalf("with NeMo's unfinished marker: finished %v, waiting %q", c.Finished, c.Waiting)
	}
	if err := os.Remove(filepath.Join(dir, name+"-unfinished")); err != nil {
		t.Fatal(err)
	}
	c = candidates(t, Options{Dir: dir})[100]
	if !c.Finished || c.Stale {
		t.Fatalf("finished NeMo save: finished %v stale %v (%s)", c.Finished, c.Stale, c.Waiting)
	}
	if c.Proof != ProofNone {
		t.Errorf("proof %v: files outside weights/ are vouched for by no marker", c.Proof)
	}
	// A named shard rewritten after the record is still stale.
	setTime(t, filepath.Join(dir, name, "weights", "__1_0.distcp"), time.Now())
	if c := candidates(t, Options{Dir: dir})[100]; c.Finished || !c.Stale {
		t.Fatalf("shard newer than its record: finished %v stale %v (%s)", c.Finished, c.Stale, c.Waiting)
	}
}

// TestDCPRecordUnreadable: a .metadata that is not a DCP record (or is
// hostile) falls back to the timing rules, with one warning per version.
func TestDCPRecordUnreadable(t *testing.T) {
	dir := t.TempDir()
	copyRecord(t, "world2", dir, "step-100")
	meta := filepath.Join(dir, "step-100", dcpMetadata)
	st, _ := os.Stat(meta)
	if err := os.WriteFile(meta, []byte("\x80\x04\x95"+strings.Repeat("\xff", 40)), 0o644); err != nil {
		t.Fatal(err)
	}
	setTime(t, meta, st.ModTime())
	core, logs := observer.New(zapcore.WarnLevel)
	opts := Options{Dir: dir, Logger: zap.New(core)}
	for range 3 {
		if c := candidates(t, opts)[100]; !c.Finished || len(c.Step.Expect) != 0 {
			t.Fatalf("unreadable record: finished %v (%s), expect %v", c.Finished, c.Waiting, c.Step.Expect)
		}
	}
	warned := logs.FilterMessageSnippet("not read as a record").All()
	if len(warned) != 3 { // one per engine: each candidates call builds its own
		t.Fatalf("%d warnings, want one per evaluation engine (3): %v", len(warned), logs.All())
	}
	if f := fmt.Sprint(warned[0].ContextMap()["file"]); f != "step-100/.metadata" {
		t.Errorf("warning names %q", f)
	}
	_ = fs.ErrNotExist
}

// TestHFOldOrderNotStale: transformers up to 4.35 writes
// trainer_state.json before every process's RNG state (Trainer.
// _save_checkpoint); a finished save in that order is complete, not stale,
// while a model file written after the marker still is.
func TestHFOldOrderNotStale(t *testing.T) {
	dir := t.TempDir()
	base := time.Now().Add(-time.Hour)
	for i, f := range []string{"model.safetensors", "optimizer.pt", "scheduler.pt", "trainer_state.json", "rng_state_0.pth", "rng_state_1.pth"} {
		write(t, dir, "checkpoint-100/"+f, "x")
		setTime(t, filepath.Join(dir, "checkpoint-100", f), base.Add(time.Duration(i)*time.Second))
	}
	c := candidates(t, Options{Dir: dir, Layout: "hf"})[100]
	if !c.Finished || c.Stale {
		t.Fatalf("HF <= 4.35 order: finished %v stale %v (%s)", c.Finished, c.Stale, c.Waiting)
	}
	setTime(t, filepath.Join(dir, "checkpoint-100", "optimizer.pt"), base.Add(time.Minute))
	if c := candidates(t, Options{Dir: dir, Layout: "hf"})[100]; c.Finished || !c.Stale {
		t.Fatalf("optimizer newer than trainer_state.json: finished %v stale %v", c.Finished, c.Stale)
	}
}

// TestLightningShardedSave: Lightning's FSDP and ModelParallel strategies
// save a sharded checkpoint as a DCP folder "epoch=E-step=S.ckpt" and then
// rank 0's meta.pt in it (lightning strategies' save_checkpoint:
// _distributed_checkpoint_save, then torch.save(checkpoint, path /
// "meta.pt")). Under auto the folder is step S, complete and not stale
// with meta.pt written after .metadata, and its proof is the settle
// window, since the record does not vouch for meta.pt.
func TestLightningShardedSave(t *testing.T) {
	dir := t.TempDir()
	name := "epoch=0-step=100.ckpt"
	copyRecord(t, "world2", dir, name)
	write(t, dir, name+"/meta.pt", "lightning state")
	setTime(t, filepath.Join(dir, name, "meta.pt"), time.Now().Add(-30*time.Minute))
	for _, layout := range []string{"auto", "dcp"} {
		c, ok := candidates(t, Options{Dir: dir, Layout: layout})[100]
		if !ok {
			t.Fatalf("%s: %s is not step 100", layout, name)
		}
		if !c.Finished || c.Stale || c.Proof != ProofNone || len(c.Step.Files) != 4 {
			t.Fatalf("%s: finished %v stale %v proof %v files %d (%s)", layout, c.Finished, c.Stale, c.Proof, len(c.Step.Files), c.Waiting)
		}
	}
}

// TestDeepSpeedPipelineLayersNotStale: with pipeline parallelism each
// stage writes its own layer_XX-model_YY-model_states.pt, and rank 0
// writes latest after its own stage's files, not the last stage's: a
// finished save whose last stage's layers landed after latest is complete,
// not stale (it waited for the next save's latest before).
func TestDeepSpeedPipelineLayersNotStale(t *testing.T) {
	dir := t.TempDir()
	base := time.Now().Add(-time.Hour)
	files := []string{"global_step10/layer_00-model_00-model_states.pt", "global_step10/layer_01-model_00-model_states.pt",
		"global_step10/mp_rank_00_model_states.pt", "latest", "global_step10/layer_02-model_00-model_states.pt", "global_step10/layer_03-model_00-model_states.pt"}
	for i, f := range files {
		content := "x"
		if f == "latest" {
			content = "global_step10"
		}
		write(t, dir, f, content)
		setTime(t, filepath.Join(dir, f), base.Add(time.Duration(i)*time.Second))
	}
	c := candidates(t, Options{Dir: dir, Layout: "deepspeed"})[10]
	if !c.Finished || c.Stale || c.Proof != ProofNone {
		t.Fatalf("pipeline save, last stage after latest: finished %v stale %v proof %v (%s)", c.Finished, c.Stale, c.Proof, c.Waiting)
	}
	setTime(t, filepath.Join(dir, "global_step10/mp_rank_00_model_states.pt"), base.Add(time.Minute))
	if c := candidates(t, Options{Dir: dir, Layout: "deepspeed"})[10]; c.Finished || !c.Stale {
		t.Fatalf("rank 0's states newer than latest: finished %v stale %v", c.Finished, c.Stale)
	}
}

// TestHFIndexSpecifiesShards: a sharded save_pretrained's index names each
// shard; a step missing one (deleted, or not written yet) is not complete
// whatever trainer_state.json says, and the reason names the shard.
func TestHFIndexSpecifiesShards(t *testing.T) {
	dir := t.TempDir()
	index := `{"metadata": {"total_size": 8}, "weight_map": {"a.weight": "model-00001-of-00002.safetensors", "b.weight": "model-00002-of-00002.safetensors"}}`
	for _, f := range []string{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"} {
		write(t, dir, "checkpoint-100/"+f, "x")
	}
	write(t, dir, "checkpoint-100/model.safetensors.index.json", index)
	write(t, dir, "checkpoint-100/trainer_state.json", "{}")
	age(t, dir)
	if c := candidates(t, Options{Dir: dir, Layout: "hf"})[100]; !c.Finished {
		t.Fatalf("whole sharded save: %s", c.Waiting)
	}
	shard := filepath.Join(dir, "checkpoint-100", "model-00002-of-00002.safetensors")
	if err := os.Remove(shard); err != nil {
		t.Fatal(err)
	}
	c := candidates(t, Options{Dir: dir, Layout: "hf"})[100]
	want := "record: checkpoint-100/model.safetensors.index.json names checkpoint-100/model-00002-of-00002.safetensors, which is not here"
	if c.Finished || c.Waiting != want {
		t.Fatalf("shard missing: finished %v, waiting %q", c.Finished, c.Waiting)
	}
	// An index naming a path outside its folder is not a record: the
	// marker rules decide, with a warning.
	write(t, dir, "checkpoint-100/model.safetensors.index.json", `{"weight_map": {"a": "../x.safetensors"}}`)
	age(t, dir)
	if c := candidates(t, Options{Dir: dir, Layout: "hf"})[100]; !c.Finished {
		t.Fatalf("unreadable index: %s", c.Waiting)
	}
}

// TestHFRootFilesWarned: the Trainer's final save_model() into output_dir
// (the watched folder) belongs to no checkpoint-N step; the agent says so
// once per file instead of saying nothing.
func TestHFRootFilesWarned(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "checkpoint-100/model.safetensors", "x")
	write(t, dir, "checkpoint-100/trainer_state.json", "{}")
	write(t, dir, "model.safetensors", "final")
	write(t, dir, "config.json", "{}")
	age(t, dir)
	core, logs := observer.New(zapcore.WarnLevel)
	w := newWatcher(t, Options{Dir: dir, Layout: "hf", Logger: zap.New(core)})
	e, err := newEngine(w.opts, w.openCheck)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := e.rescan(nil); err != nil {
			t.Fatal(err)
		}
		e.candidates()
	}
	warned := logs.FilterMessageSnippet("belongs to no checkpoint-N step").All()
	if len(warned) != 2 {
		t.Fatalf("%d warnings, want one per root file (2): %v", len(warned), logs.All())
	}
}
