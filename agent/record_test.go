package agent

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

// dsRecords holds DeepSpeed-shaped steps saved by torch 2.6
// (testdata/deepspeed-records/gen.py).
const dsRecords = "../testdata/deepspeed-records"

// TestAgentDeepSpeedRecordHoldsStep: DeepSpeed's latest names
// global_step100, written (as rank 0 does) after rank 0's files, while
// data-parallel rank 3's optimizer file is missing. Rank 0's model states
// record dp_world_size 4, so the step is never committed, and the log
// names the missing file; once the file lands the step is committed with
// it. Before the record was read, the step was committed without it.
func TestAgentDeepSpeedRecordHoldsStep(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	h := startAgent(t, func(o *Options) {
		o.Detect.Layout = "deepspeed"
		o.Logger = zap.New(core)
	})
	src := filepath.Join(dsRecords, "zero2-dp4")
	const missing = "global_step100/zero_pp_rank_3_mp_rank_00_optim_states.pt"
	old := time.Now().Add(-time.Hour)
	stage := t.TempDir() // written here, then moved in: one event, no partial file seen
	for _, rel := range []string{
		"global_step100/mp_rank_00_model_states.pt",
		"global_step100/zero_pp_rank_0_mp_rank_00_optim_states.pt",
		"global_step100/zero_pp_rank_1_mp_rank_00_optim_states.pt",
		"global_step100/zero_pp_rank_2_mp_rank_00_optim_states.pt",
		"latest",
	} {
		data, err := os.ReadFile(filepath.Join(src, rel))
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(stage, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		when := old
		if rel == "latest" {
			when = old.Add(time.Second)
		}
		if err := os.Chtimes(p, when, when); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Rename(filepath.Join(stage, "global_step100"), filepath.Join(h.watch, "global_step100")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(stage, "latest"), filepath.Join(h.watch, "latest")); err != nil {
		t.Fatal(err)
	}

	// Many settle windows (300 ms): the step waits, and says why.
	waitFor(t, "the warning naming the missing file", 20*time.Second, func() bool {
		for _, e := range logs.FilterMessageSnippet("not complete").All() {
			if strings.Contains(fmt.Sprint(e.ContextMap()["reason"]), missing) {
				return true
			}
		}
		return false
	})
	warned := logs.FilterMessageSnippet("not complete").All()
	reason := fmt.Sprint(warned[len(warned)-1].ContextMap()["reason"])
	for _, want := range []string{missing + " is not here", "expected: present", "found: nothing", "dp_world_size 4"} {
		if !strings.Contains(reason, want) {
			t.Errorf("reason %q does not say %q", reason, want)
		}
	}
	time.Sleep(time.Second)
	if got := h.committedSteps(); len(got) != 0 {
		t.Fatalf("committed %v with %s missing", got, missing)
	}
	// (flush does not wait for it: a file the record names that is
	// missing may be a cleanup's deletion, not a save in progress.)

	// Rank 3's file lands: the step is the save DeepSpeed recorded.
	data, err := os.ReadFile(filepath.Join(src, missing))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(h.watch, missing), data, 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "step 100 committed", 20*time.Second, func() bool { return len(h.committedSteps()) == 1 })
}
