package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"io/fs"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/zeebo/blake3"

	"github.com/ferrylabs/ferry/internal/remote"
	"github.com/ferrylabs/ferry/internal/s3test"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/manifest"
	"github.com/ferrylabs/ferry/restore"
)

// The writer-pattern suite: the save orders real trainers use, run against
// `ferry agent` at its defaults (flags only where a layout needs naming or
// a row is about a flag) on a real S3 server. Every row ends when the step
// committed in the bucket holds exactly the trainer's final files; it is
// then restored into an empty folder and compared byte for byte. A row
// marked firstCommitFinal also proves that the first commit was already
// the final one (revision 0): no torn version was ever what restore gave.
//
// The fast rows run in `make test`; FERRY_WRITER_SUITE=full (`make
// test-writers`, run by .ci/run) adds the rest: more gaps, more layouts,
// flags.

// writerCase is one save order.
type writerCase struct {
	name string
	full bool     // only with FERRY_WRITER_SUITE=full
	args []string // agent flags beyond the defaults
	// setup writes what exists before the agent starts.
	setup func(w *trainer)
	// save is the trainer's save; it may wait for earlier steps to commit.
	save func(w *trainer)
	// step to check (-1: the latest, for counted flat steps), its files
	// (relative to the watch dir) and what restore adds besides them
	// (pointer files, links).
	step      int64
	files     []string
	generated []string
	// firstCommitFinal: the first commit holds the final files.
	firstCommitFinal bool
	// never: the step must not be committed; the agent's log says why.
	never string
	// kept: the committed step must still hold the files as the trainer
	// had them when save called w.keep (a later save tore or shrank them),
	// and the agent's log says kept.
	kept string
	// absent: steps that must never be committed (a temporary folder's
	// digits, a number misread from a name).
	absent []int64
}

// trainer writes a case's files with deterministic contents.
type trainer struct {
	t       *testing.T
	dir     string
	version map[string]int
	st      store.Store
	prefix  string
	// kept is what keep recorded: path -> BLAKE3.
	kept map[string]string
}

// keep records the files as they are now: the version the bucket must
// keep whatever the rest of the save does.
func (w *trainer) keep(files ...string) { w.kept = finalHashes(w.t, w, files) }

func (w *trainer) abs(rel string) string { return filepath.Join(w.dir, filepath.FromSlash(rel)) }

// bytesFor returns the next version of a file's contents.
func (w *trainer) bytesFor(rel string, size int) []byte {
	w.version[rel]++
	b := make([]byte, size)
	rand.New(rand.NewSource(int64(len(rel))*7919 + int64(w.version[rel]))).Read(b)
	copy(b, rel) // distinct per path even for equal sizes
	return b
}

// write creates (or replaces in place) a file in chunks with pauses, as
// torch.save does, and closes it.
func (w *trainer) write(rel string, size, chunks int, pause time.Duration) {
	w.t.Helper()
	if err := os.MkdirAll(filepath.Dir(w.abs(rel)), 0o755); err != nil {
		w.t.Fatal(err)
	}
	f, err := os.OpenFile(w.abs(rel), os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		w.t.Fatal(err)
	}
	data := w.bytesFor(rel, size)
	for i := range chunks {
		if i > 0 {
			time.Sleep(pause)
		}
		if _, err := f.Write(data[i*size/chunks : (i+1)*size/chunks]); err != nil {
			w.t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		w.t.Fatal(err)
	}
}

func (w *trainer) file(rel string, size int) { w.write(rel, size, 1, 0) }

// appendReopen appends size bytes to a file with its own open and close.
func (w *trainer) appendReopen(rel string, size int) {
	w.t.Helper()
	f, err := os.OpenFile(w.abs(rel), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		w.t.Fatal(err)
	}
	if _, err := f.Write(w.bytesFor(rel, size)); err != nil {
		w.t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		w.t.Fatal(err)
	}
}

// patch overwrites the first bytes of a file in place.
func (w *trainer) patch(rel string, size int) {
	w.t.Helper()
	f, err := os.OpenFile(w.abs(rel), os.O_WRONLY, 0)
	if err != nil {
		w.t.Fatal(err)
	}
	if _, err := f.WriteAt(w.bytesFor(rel+"#patch", size), 0); err != nil {
		w.t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		w.t.Fatal(err)
	}
}

// text writes a small file at once (a marker, a pointer).
func (w *trainer) text(rel, content string) {
	w.t.Helper()
	if err := os.MkdirAll(filepath.Dir(w.abs(rel)), 0o755); err != nil {
		w.t.Fatal(err)
	}
	if err := os.WriteFile(w.abs(rel), []byte(content), 0o644); err != nil {
		w.t.Fatal(err)
	}
}

func (w *trainer) rename(from, to string) {
	w.t.Helper()
	if err := os.Rename(w.abs(from), w.abs(to)); err != nil {
		w.t.Fatal(err)
	}
}

// link points a symlink at target, replacing it atomically as Composer does.
func (w *trainer) link(rel, target string) {
	w.t.Helper()
	tmp := w.abs(rel) + ".new~"
	if err := os.Symlink(target, tmp); err != nil {
		w.t.Fatal(err)
	}
	if err := os.Rename(tmp, w.abs(rel)); err != nil {
		w.t.Fatal(err)
	}
}

func (w *trainer) removeAll(rel string) {
	w.t.Helper()
	if err := os.RemoveAll(w.abs(rel)); err != nil {
		w.t.Fatal(err)
	}
}

// committedStep waits until step is committed (any content).
func (w *trainer) committedStep(step int64) {
	w.t.Helper()
	waitFor(w.t, fmt.Sprintf("step %d committed", step), 60*time.Second, func() bool {
		_, err := remote.Get(context.Background(), w.st, w.prefix, step)
		return err == nil
	})
}

const kib = 1 << 10

func writerCases() []writerCase {
	flat := []string{"--layout", "flat", "--step-pattern", `^(?:model|optim|extra)-(\d+)\.pt$`}
	cases := []writerCase{
		{
			name: "dcp/ranks at different times, metadata renamed last",
			save: func(w *trainer) {
				w.write("step_100/__0_0.distcp", 300*kib, 3, 200*time.Millisecond)
				time.Sleep(time.Second)
				w.write("step_100/__1_0.distcp", 300*kib, 3, 300*time.Millisecond)
				w.text("step_100/.metadata.tmp", "metadata")
				w.rename("step_100/.metadata.tmp", "step_100/.metadata")
			},
			step: 100, files: []string{"step_100/__0_0.distcp", "step_100/__1_0.distcp", "step_100/.metadata"}, firstCommitFinal: true,
		},
		{
			name: "deepspeed/rank 1 between model and optimizer states when latest is written",
			save: func(w *trainer) {
				w.file("global_step100/zero_pp_rank_0_mp_rank_00_model_states.pt", 100*kib)
				w.file("global_step100/zero_pp_rank_0_mp_rank_00_optim_states.pt", 200*kib)
				w.file("global_step100/zero_pp_rank_1_mp_rank_00_model_states.pt", 100*kib)
				w.text("latest", "global_step100")
				time.Sleep(6 * time.Second) // longer than the settle window
				w.write("global_step100/zero_pp_rank_1_mp_rank_00_optim_states.pt", 200*kib, 2, 300*time.Millisecond)
			},
			step: 100, files: []string{"global_step100/zero_pp_rank_0_mp_rank_00_model_states.pt", "global_step100/zero_pp_rank_0_mp_rank_00_optim_states.pt",
				"global_step100/zero_pp_rank_1_mp_rank_00_model_states.pt", "global_step100/zero_pp_rank_1_mp_rank_00_optim_states.pt"},
			generated: []string{"latest"}, firstCommitFinal: true,
		},
		{
			name: "hf fsdp/rank 1's rng state 2s after trainer_state.json",
			save: func(w *trainer) {
				w.file("checkpoint-100/pytorch_model_fsdp_0/__0_0.distcp", 200*kib)
				w.file("checkpoint-100/pytorch_model_fsdp_0/__1_0.distcp", 200*kib)
				w.file("checkpoint-100/rng_state_0.pth", 4*kib)
				w.text("checkpoint-100/trainer_state.json", `{"global_step": 100}`)
				time.Sleep(2 * time.Second)
				w.file("checkpoint-100/rng_state_1.pth", 4*kib)
			},
			step: 100, files: []string{"checkpoint-100/pytorch_model_fsdp_0/__0_0.distcp", "checkpoint-100/pytorch_model_fsdp_0/__1_0.distcp",
				"checkpoint-100/rng_state_0.pth", "checkpoint-100/rng_state_1.pth", "checkpoint-100/trainer_state.json"}, firstCommitFinal: true,
		},
		{
			name: "composer/second save, rank 1 a save behind for longer than the settle window",
			setup: func(w *trainer) {
				w.file("ep0-ba10-rank0.pt", 100*kib)
				w.file("ep0-ba10-rank1.pt", 100*kib)
				w.link("latest-rank0.pt", "ep0-ba10-rank0.pt")
				w.link("latest-rank1.pt", "ep0-ba10-rank1.pt")
			},
			save: func(w *trainer) {
				w.committedStep(10)
				w.write("ep0-ba20-rank0.pt", 200*kib, 2, 200*time.Millisecond)
				w.link("latest-rank0.pt", "ep0-ba20-rank0.pt")
				time.Sleep(6 * time.Second)
				w.write("ep0-ba20-rank1.pt", 200*kib, 2, 200*time.Millisecond)
				w.link("latest-rank1.pt", "ep0-ba20-rank1.pt")
			},
			step: 20, files: []string{"ep0-ba20-rank0.pt", "ep0-ba20-rank1.pt"},
			generated: []string{"latest-rank0.pt", "latest-rank1.pt"}, firstCommitFinal: true,
		},
		{
			name: "flat/second file 2s after the first closed",
			args: flat,
			save: func(w *trainer) {
				w.file("model-100.pt", 200*kib)
				time.Sleep(2 * time.Second)
				w.file("optim-100.pt", 200*kib)
			},
			step: 100, files: []string{"model-100.pt", "optim-100.pt"}, firstCommitFinal: true,
		},
		{
			name: "flat/appended in chunks, closed and reopened 1s apart",
			args: flat,
			save: func(w *trainer) {
				for range 4 {
					w.appendReopen("model-100.pt", 64*kib)
					time.Sleep(time.Second)
				}
			},
			step: 100, files: []string{"model-100.pt"}, firstCommitFinal: true,
		},
		{
			name: "flat/header patched in place 6.5s after close: the early commit is revised",
			args: flat,
			save: func(w *trainer) {
				w.file("model-100.pt", 256*kib)
				time.Sleep(6500 * time.Millisecond)
				w.patch("model-100.pt", 64)
			},
			step: 100, files: []string{"model-100.pt"},
		},
		{
			name: "megatron/resumed from an older iteration: the tracker names a later one",
			setup: func(w *trainer) {
				w.file("iter_0000100/mp_rank_00/model_optim_rng.pt", 64*kib)
				w.file("iter_0000200/mp_rank_00/model_optim_rng.pt", 64*kib)
				w.text("latest_checkpointed_iteration.txt", "200")
			},
			save: func(w *trainer) {
				w.committedStep(200)
				w.file("iter_0000150/mp_rank_00/model_optim_rng.pt", 128*kib)
				time.Sleep(2 * time.Second)
				w.file("iter_0000150/mp_rank_01/model_optim_rng.pt", 128*kib)
				w.text("latest_checkpointed_iteration.txt", "150")
			},
			step: 150, files: []string{"iter_0000150/mp_rank_00/model_optim_rng.pt", "iter_0000150/mp_rank_01/model_optim_rng.pt"},
			generated: []string{"latest_checkpointed_iteration.txt"}, firstCommitFinal: true,
		},
		{
			name: "dcp/a second descriptor closes a shard its writer still holds open",
			save: func(w *trainer) {
				if err := os.MkdirAll(w.abs("step_100"), 0o755); err != nil {
					w.t.Fatal(err)
				}
				f, err := os.Create(w.abs("step_100/__0_0.distcp"))
				if err != nil {
					w.t.Fatal(err)
				}
				if _, err := f.Write(w.bytesFor("step_100/__0_0.distcp", 256*kib)); err != nil {
					w.t.Fatal(err)
				}
				touch, err := os.OpenFile(w.abs("step_100/__0_0.distcp"), os.O_WRONLY, 0)
				if err != nil {
					w.t.Fatal(err)
				}
				touch.Close()
				w.text("step_100/.metadata", "metadata")
				time.Sleep(2 * time.Second)
				if err := f.Close(); err != nil {
					w.t.Fatal(err)
				}
			},
			step: 100, files: []string{"step_100/.metadata", "step_100/__0_0.distcp"}, firstCommitFinal: true,
		},
		{
			name: "dcp/shard written on after .metadata (an old marker): never committed, and the agent says why",
			save: func(w *trainer) {
				w.text("step_100/.metadata", "metadata")
				w.write("step_100/__0_0.distcp", 256*kib, 2, time.Second)
			},
			step: 100, never: ".metadata is older than step_100/__0_0.distcp",
		},
		{
			name: "dcp/a committed step saved again with other bytes is revised",
			save: func(w *trainer) {
				w.file("step_100/__0_0.distcp", 128*kib)
				w.text("step_100/.metadata", "metadata v1")
				w.committedStep(100)
				w.removeAll("step_100")
				w.file("step_100/__0_0.distcp", 160*kib)
				w.text("step_100/.metadata", "metadata v2")
			},
			step: 100, files: []string{"step_100/__0_0.distcp", "step_100/.metadata"},
		},
		{
			name: "deepspeed/step folder is a symbolic link: not committed, and the agent says why",
			save: func(w *trainer) {
				elsewhere := w.t.TempDir()
				if err := os.WriteFile(filepath.Join(elsewhere, "mp_rank_00_model_states.pt"), []byte("model"), 0o644); err != nil {
					w.t.Fatal(err)
				}
				if err := os.Symlink(elsewhere, w.abs("global_step100")); err != nil {
					w.t.Fatal(err)
				}
				w.text("latest", "global_step100")
			},
			step: 100, never: "is a symbolic link",
		},
	}
	cases = append(cases, habitCases()...)
	return append(cases, fullWriterCases(flat)...)
}

// fullWriterCases are the slower rows, run with FERRY_WRITER_SUITE=full.
func fullWriterCases(flat []string) []writerCase {
	var cases []writerCase
	for _, gap := range []time.Duration{300 * time.Millisecond, time.Second, 3 * time.Second, 4500 * time.Millisecond} {
		cases = append(cases, writerCase{
			name: fmt.Sprintf("flat/three files %v apart", gap), full: true, args: flat,
			save: func(w *trainer) {
				w.file("model-100.pt", 128*kib)
				time.Sleep(gap)
				w.file("optim-100.pt", 128*kib)
				time.Sleep(gap)
				w.file("extra-100.pt", 16*kib)
			},
			step: 100, files: []string{"model-100.pt", "optim-100.pt", "extra-100.pt"}, firstCommitFinal: true,
		})
	}
	for _, gap := range []time.Duration{300 * time.Millisecond, 2 * time.Second, 4 * time.Second} {
		cases = append(cases, writerCase{
			name: fmt.Sprintf("flat/two-pass writer patches its header %v after close", gap), full: true, args: flat,
			save: func(w *trainer) {
				w.file("model-100.pt", 256*kib)
				time.Sleep(gap)
				w.patch("model-100.pt", 64)
			},
			step: 100, files: []string{"model-100.pt"}, firstCommitFinal: true,
		})
	}
	cases = append(cases,
		writerCase{
			name: "deepspeed/--expected-ranks 2, rank 1's optimizer states 2s late", full: true, args: []string{"--expected-ranks", "2"},
			save: func(w *trainer) {
				w.file("global_step100/zero_pp_rank_0_mp_rank_00_model_states.pt", 64*kib)
				w.file("global_step100/zero_pp_rank_0_mp_rank_00_optim_states.pt", 128*kib)
				w.file("global_step100/zero_pp_rank_1_mp_rank_00_model_states.pt", 64*kib)
				w.text("latest", "global_step100")
				time.Sleep(2 * time.Second)
				w.file("global_step100/zero_pp_rank_1_mp_rank_00_optim_states.pt", 128*kib)
			},
			step: 100, files: []string{"global_step100/zero_pp_rank_0_mp_rank_00_model_states.pt", "global_step100/zero_pp_rank_0_mp_rank_00_optim_states.pt",
				"global_step100/zero_pp_rank_1_mp_rank_00_model_states.pt", "global_step100/zero_pp_rank_1_mp_rank_00_optim_states.pt"},
			generated: []string{"latest"}, firstCommitFinal: true,
		},
		writerCase{
			name: "deepspeed/tensor parallel, --expected-ranks 2, names without a global rank", full: true, args: []string{"--expected-ranks", "2"},
			save: func(w *trainer) {
				w.file("global_step100/mp_rank_00_model_states.pt", 64*kib)
				w.file("global_step100/zero_pp_rank_0_mp_rank_00_optim_states.pt", 64*kib)
				w.text("latest", "global_step100")
				time.Sleep(time.Second)
				w.file("global_step100/mp_rank_01_model_states.pt", 64*kib)
				w.file("global_step100/zero_pp_rank_0_mp_rank_01_optim_states.pt", 64*kib)
			},
			step: 100, files: []string{"global_step100/mp_rank_00_model_states.pt", "global_step100/zero_pp_rank_0_mp_rank_00_optim_states.pt",
				"global_step100/mp_rank_01_model_states.pt", "global_step100/zero_pp_rank_0_mp_rank_01_optim_states.pt"},
			generated: []string{"latest"}, firstCommitFinal: true,
		},
		writerCase{
			name: "hf/--expected-ranks 2, rank 1's rng state 3s after trainer_state.json", full: true, args: []string{"--expected-ranks", "2"},
			save: func(w *trainer) {
				w.file("checkpoint-100/model.safetensors", 128*kib)
				w.file("checkpoint-100/rng_state_0.pth", 4*kib)
				w.text("checkpoint-100/trainer_state.json", `{"global_step": 100}`)
				time.Sleep(3 * time.Second)
				w.file("checkpoint-100/rng_state_1.pth", 4*kib)
			},
			step: 100, files: []string{"checkpoint-100/model.safetensors", "checkpoint-100/rng_state_0.pth", "checkpoint-100/rng_state_1.pth",
				"checkpoint-100/trainer_state.json"}, firstCommitFinal: true,
		},
		writerCase{
			name: "composer/first save, rank 1 starts 3s after rank 0 finished", full: true,
			save: func(w *trainer) {
				w.file("ep0-ba10-rank0.pt", 128*kib)
				w.link("latest-rank0.pt", "ep0-ba10-rank0.pt")
				time.Sleep(3 * time.Second)
				w.file("ep0-ba10-rank1.pt", 128*kib)
				w.link("latest-rank1.pt", "ep0-ba10-rank1.pt")
			},
			step: 10, files: []string{"ep0-ba10-rank0.pt", "ep0-ba10-rank1.pt"},
			generated: []string{"latest-rank0.pt", "latest-rank1.pt"}, firstCommitFinal: true,
		},
		writerCase{
			name: "megatron/pipeline folders mp_rank_TT_PPP, --expected-ranks 2, tracker written last", full: true, args: []string{"--expected-ranks", "2"},
			save: func(w *trainer) {
				w.file("iter_0000100/mp_rank_00_000/model_optim_rng.pt", 64*kib)
				time.Sleep(time.Second)
				w.file("iter_0000100/mp_rank_00_001/model_optim_rng.pt", 64*kib)
				w.text("latest_checkpointed_iteration.txt", "100")
			},
			step: 100, files: []string{"iter_0000100/mp_rank_00_000/model_optim_rng.pt", "iter_0000100/mp_rank_00_001/model_optim_rng.pt"},
			generated: []string{"latest_checkpointed_iteration.txt"}, firstCommitFinal: true,
		},
		writerCase{
			name: "flat counter/orbax temporary folder renamed when done", full: true, args: []string{"--layout", "flat"},
			save: func(w *trainer) {
				w.file("100.orbax-checkpoint-tmp-1733300000/state/array.bin", 128*kib)
				time.Sleep(2 * time.Second)
				w.file("100.orbax-checkpoint-tmp-1733300000/state/_METADATA", 2*kib)
				w.rename("100.orbax-checkpoint-tmp-1733300000", "100")
			},
			step: -1, files: []string{"100/state/array.bin", "100/state/_METADATA"}, firstCommitFinal: true,
		},
		writerCase{
			name: "composer/a committed step re-saved by a restarted run is revised", full: true,
			save: func(w *trainer) {
				w.file("ep0-ba10-rank0.pt", 64*kib)
				w.link("latest-rank0.pt", "ep0-ba10-rank0.pt")
				w.committedStep(10)
				w.file("ep0-ba10-rank0.pt", 96*kib)
				w.link("latest-rank0.pt", "ep0-ba10-rank0.pt") // repointed after the save, as Composer does
			},
			step: 10, files: []string{"ep0-ba10-rank0.pt"}, generated: []string{"latest-rank0.pt"},
		},
	)
	return cases
}

func TestWriterPatterns(t *testing.T) {
	full := os.Getenv("FERRY_WRITER_SUITE") == "full"
	srv := s3test.Shared(t)
	for _, c := range writerCases() {
		if c.full && !full {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			runWriterCase(t, srv, c)
		})
	}
}

func runWriterCase(t *testing.T, srv *s3test.Server, c writerCase) {
	bucket := srv.NewBucket(t)
	w := &trainer{t: t, dir: t.TempDir(), version: map[string]int{}, st: srv.Store(t, bucket), prefix: "run"}
	if c.setup != nil {
		c.setup(w)
	}
	// A short state dir: the control socket's path must fit in ~100 bytes.
	state, err := os.MkdirTemp("", "fw")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(state) })
	args := append([]string{"--watch", w.dir, "--to", "s3://" + bucket + "/run", "--state-dir", state, "--metrics-addr", "off"}, c.args...)
	agent := startAgentProcess(t, srv.Env(), args...)
	// The agent watches before the save starts: its log says so.
	waitFor(t, "the agent to start watching", 30*time.Second, func() bool { return strings.Contains(agent.logs.String(), "agent started") })
	c.save(w)
	if c.kept != "" {
		time.Sleep(8 * time.Second) // past a settle window and its warning
		m := committedManifest(w, c.step)
		if m == nil || !holds(m, w.kept, c.generated) {
			t.Fatalf("step %d in the bucket %v, want the kept version %v", c.step, m, w.kept)
		}
		if !strings.Contains(agent.logs.String(), c.kept) {
			t.Fatalf("the agent's log does not say %q", c.kept)
		}
		stopAgent(t, agent)
		return
	}
	if c.never != "" {
		time.Sleep(8 * time.Second) // past a settle window and its warning
		if _, err := remote.Get(context.Background(), w.st, w.prefix, c.step); err == nil {
			t.Fatalf("step %d was committed", c.step)
		}
		if !strings.Contains(agent.logs.String(), c.never) {
			t.Fatalf("the agent's log does not say %q", c.never)
		}
		stopAgent(t, agent)
		return
	}
	want := finalHashes(t, w, c.files)
	var m *manifest.Manifest
	waitFor(t, "the final files committed", 60*time.Second, func() bool {
		m = committedManifest(w, c.step)
		return m != nil && holds(m, want, c.generated)
	})
	for _, n := range c.absent {
		if _, err := remote.Get(context.Background(), w.st, w.prefix, n); err == nil {
			t.Errorf("step %d was committed", n)
		}
	}
	if c.firstCommitFinal && m.Revision != 0 {
		t.Errorf("the final files are revision %d: an earlier, torn version was committed first", m.Revision)
	}
	stopAgent(t, agent)
	compareRestore(t, w, m.Step, c.files, c.generated)
}

// finalHashes hashes the trainer's final files.
func finalHashes(t *testing.T, w *trainer, files []string) map[string]string {
	out := map[string]string{}
	for _, f := range files {
		data, err := os.ReadFile(w.abs(f))
		if err != nil {
			t.Fatalf("trainer's file %s: %v", f, err)
		}
		sum := blake3.Sum256(data)
		out[f] = hex.EncodeToString(sum[:])
	}
	return out
}

// committedManifest reads the step's manifest (the latest for -1), nil if
// none.
func committedManifest(w *trainer, step int64) *manifest.Manifest {
	ctx := context.Background()
	var m *manifest.Manifest
	var err error
	if step < 0 {
		m, err = remote.Latest(ctx, w.st, w.prefix)
	} else {
		m, err = remote.Get(ctx, w.st, w.prefix, step)
	}
	if err != nil {
		return nil
	}
	return m
}

// holds reports whether m names exactly the wanted files with their final
// hashes, plus the generated files.
func holds(m *manifest.Manifest, want map[string]string, generated []string) bool {
	gen := map[string]bool{}
	for _, g := range generated {
		gen[g] = true
	}
	n := 0
	for _, f := range m.Files {
		switch {
		case want[f.Path] == f.BLAKE3:
			n++
		case gen[f.Path]:
		default:
			return false
		}
	}
	return n == len(want)
}

func stopAgent(t *testing.T, a *agentProcess) {
	t.Helper()
	if err := a.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := waitExit(t, a.Cmd, time.Minute); err != nil {
		t.Errorf("agent after SIGTERM: %v", err)
	}
}

// compareRestore restores the step into an empty folder and compares it
// with the trainer's files byte for byte; nothing else but the generated
// pointers may appear.
func compareRestore(t *testing.T, w *trainer, step int64, files, generated []string) {
	t.Helper()
	dst := t.TempDir()
	if _, err := restore.Restore(context.Background(), restore.Options{Store: w.st, Prefix: w.prefix, Dir: dst, Step: step}); err != nil {
		t.Fatalf("restore step %d: %v", step, err)
	}
	var got []string
	err := filepath.WalkDir(dst, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dst, p)
		got = append(got, filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	wantAll := append(append([]string(nil), files...), generated...)
	sort.Strings(got)
	sort.Strings(wantAll)
	if strings.Join(got, "\n") != strings.Join(wantAll, "\n") {
		t.Fatalf("restored %q, want %q", got, wantAll)
	}
	for _, f := range files {
		a, _ := os.ReadFile(filepath.Join(dst, filepath.FromSlash(f)))
		b, _ := os.ReadFile(w.abs(f))
		if !bytes.Equal(a, b) {
			t.Errorf("%s: restored bytes differ from the trainer's final file", f)
		}
	}
}

// habitCases are trainers' habits around their saves (issue 37): re-saves
// killed halfway, cleanup of older steps, temporary folders, quick
// deletion, single-file trainers, names.
func habitCases() []writerCase {
	dcpStep := func(w *trainer, dir string, size int) {
		w.file(dir+"/__0_0.distcp", size)
		w.file(dir+"/__1_0.distcp", size)
		w.text(dir+"/.metadata.tmp", "metadata "+dir)
		w.rename(dir+"/.metadata.tmp", dir+"/.metadata")
	}
	return []writerCase{
		{
			name: "dcp/rolled back and saved again, killed halfway: the committed step is kept",
			save: func(w *trainer) {
				dcpStep(w, "step-200", 128*kib)
				w.committedStep(200)
				w.keep("step-200/__0_0.distcp", "step-200/__1_0.distcp", "step-200/.metadata")
				w.file("step-200/__0_0.distcp", 160*kib)
				w.write("step-200/__1_0.distcp", 160*kib, 2, 200*time.Millisecond) // killed: no new .metadata
			},
			step: 200, kept: ".metadata is older than",
		},
		{
			name: "hf/cleanup deletes the optimizer states of a committed step: the bucket keeps them",
			save: func(w *trainer) {
				w.file("checkpoint-100/model.safetensors", 64*kib)
				w.file("checkpoint-100/optimizer.pt", 128*kib)
				w.text("checkpoint-100/trainer_state.json", `{"global_step": 100}`)
				w.committedStep(100)
				w.keep("checkpoint-100/model.safetensors", "checkpoint-100/optimizer.pt", "checkpoint-100/trainer_state.json")
				w.removeAll("checkpoint-100/optimizer.pt")
			},
			step: 100, kept: "the bucket keeps the committed version",
		},
		{
			name: "dcp/written in tmp-<pid> and renamed to step-300: never a step 4242",
			save: func(w *trainer) {
				dcpStep(w, "tmp-4242", 96*kib)
				time.Sleep(time.Second)
				w.rename("tmp-4242", "step-300")
			},
			step: 300, files: []string{"step-300/__0_0.distcp", "step-300/__1_0.distcp", "step-300/.metadata"}, firstCommitFinal: true,
			absent: []int64{4242},
		},
		{
			name: "dcp/NeMo folder names: the step is step=N, not consumed_samples",
			save: func(w *trainer) {
				dcpStep(w, "gpt--val_loss=2.35-step=150-consumed_samples=4800.0", 64*kib)
			},
			step: 150, files: []string{"gpt--val_loss=2.35-step=150-consumed_samples=4800.0/__0_0.distcp",
				"gpt--val_loss=2.35-step=150-consumed_samples=4800.0/__1_0.distcp",
				"gpt--val_loss=2.35-step=150-consumed_samples=4800.0/.metadata"}, firstCommitFinal: true,
			absent: []int64{0, 4800},
		},
		{
			name: "hf/a complete step deleted within its settle window: lost, and the agent says so",
			save: func(w *trainer) {
				w.file("checkpoint-100/model.safetensors", 64*kib)
				w.text("checkpoint-100/trainer_state.json", `{"global_step": 100}`)
				time.Sleep(time.Second)
				w.removeAll("checkpoint-100")
			},
			step: 100, never: "complete checkpoint deleted before it could be uploaded",
		},
		{
			name: "single/checkpoint.pth.tar rewritten every 3s: the latest version is durable while it trains",
			save: func(w *trainer) {
				for epoch := range 3 {
					w.file("checkpoint.pth.tar", (64+epoch)*kib)
					if epoch == 1 {
						w.file("model_best.pth.tar", 32*kib)
					}
					time.Sleep(3 * time.Second)
				}
			},
			step: -1, files: []string{"checkpoint.pth.tar", "model_best.pth.tar"},
		},
	}
}
