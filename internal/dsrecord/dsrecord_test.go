package dsrecord

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// recordsDir holds DeepSpeed-shaped steps saved by torch 2.6
// (testdata/deepspeed-records/gen.py).
const recordsDir = "../../testdata/deepspeed-records"

// TestReadRealSaves: every model states file torch.save wrote gives the
// world sizes Python put in it.
func TestReadRealSaves(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(recordsDir, "want.json"))
	if err != nil {
		t.Fatal(err)
	}
	var want map[string]map[string]struct {
		DP int `json:"dp_world_size"`
		MP int `json:"mp_world_size"`
	}
	if err := json.Unmarshal(raw, &want); err != nil {
		t.Fatal(err)
	}
	n := 0
	for step, files := range want {
		for name, w := range files {
			data, err := os.ReadFile(filepath.Join(recordsDir, step, "global_step100", name))
			if err != nil {
				t.Fatal(err)
			}
			rec, err := Read(bytes.NewReader(data), int64(len(data)))
			if err != nil {
				t.Fatalf("%s/%s: %v", step, name, err)
			}
			if rec.DPWorldSize != w.DP || rec.MPWorldSize != w.MP {
				t.Errorf("%s/%s: dp %d mp %d, want dp %d mp %d", step, name, rec.DPWorldSize, rec.MPWorldSize, w.DP, w.MP)
			}
			n++
		}
	}
	if n < 5 {
		t.Fatalf("%d model states files read, want the 5 gen.py writes", n)
	}
}

// TestReadRefuses: an optimizer states file (no world sizes), a file cut
// short, and bytes that are no zip are errors naming why, never a record.
func TestReadRefuses(t *testing.T) {
	optim, err := os.ReadFile(filepath.Join(recordsDir, "zero2-dp4", "global_step100", "zero_pp_rank_0_mp_rank_00_optim_states.pt"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Read(bytes.NewReader(optim), int64(len(optim))); err == nil || !bytes.Contains([]byte(err.Error()), []byte("no dp_world_size")) {
		t.Errorf("optimizer states: %v, want no dp_world_size", err)
	}
	model, err := os.ReadFile(filepath.Join(recordsDir, "zero2-dp4", "global_step100", "mp_rank_00_model_states.pt"))
	if err != nil {
		t.Fatal(err)
	}
	for _, cut := range []int{0, 10, len(model) / 2, len(model) - 1} {
		if _, err := Read(bytes.NewReader(model[:cut]), int64(cut)); !errors.Is(err, ErrNotZip) {
			t.Errorf("cut at %d: %v, want ErrNotZip", cut, err)
		}
	}
	junk := bytes.Repeat([]byte{0xab}, 4096)
	if _, err := Read(bytes.NewReader(junk), int64(len(junk))); !errors.Is(err, ErrNotZip) {
		t.Errorf("junk: %v, want ErrNotZip", err)
	}
}

// FuzzRead: no input panics or allocates past the bounds.
func FuzzRead(f *testing.F) {
	model, err := os.ReadFile(filepath.Join(recordsDir, "zero2-dp4", "global_step100", "mp_rank_00_model_states.pt"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(model)
	f.Fuzz(func(t *testing.T, data []byte) {
		rec, err := Read(bytes.NewReader(data), int64(len(data)))
		if err == nil && (rec.DPWorldSize < 1 || rec.MPWorldSize < 1) {
			t.Fatalf("record %+v without error", rec)
		}
	})
}
