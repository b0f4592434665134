package agent

import (
	"bytes"
	"testing"

	"github.com/ferrylabs/ferry/internal/dsrecord"
)

// TestReplayDeepSpeedRecordReadable: the model states the trace replay
// writes for a deepspeed-world header are read by the agent's record
// reader as DeepSpeed's own are, and a cut copy is not.
func TestReplayDeepSpeedRecordReadable(t *testing.T) {
	f := newFz(1, t.TempDir())
	f.dsWorld = [2]int{4, 2}
	for _, rel := range []string{"global_step5/mp_rank_01_model_states.pt", "global_step5/zero_pp_rank_3_mp_rank_00_model_states.pt"} {
		data := f.content(rel, 8192)
		rec, err := dsrecord.Read(bytes.NewReader(data), int64(len(data)))
		if err != nil || rec.DPWorldSize != 4 || rec.MPWorldSize != 2 {
			t.Fatalf("%s: record %+v, %v; want dp 4, mp 2", rel, rec, err)
		}
		if _, err := dsrecord.Read(bytes.NewReader(data[:len(data)/2]), int64(len(data)/2)); err == nil {
			t.Fatalf("%s: half the archive read as a record", rel)
		}
	}
	if data := f.content("global_step5/layer_01-model_00-model_states.pt", 8192); bytes.Contains(data, []byte("dp_world_size")) {
		t.Fatal("a pipeline layer's file was written as the engine's model states")
	}
}
