package detect

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkEvaluate measures one evaluation over a large checkpoint folder
// (200 DeepSpeed steps of 100 files each), the work done per debounce
// window while a trainer writes.
func BenchmarkEvaluate(b *testing.B) {
	dir := b.TempDir()
	for s := 1; s <= 200; s++ {
		for f := 0; f < 100; f++ {
			write(b, dir, fmt.Sprintf("global_step%d/zero_pp_rank_%d_mp_rank_00_optim_states.pt", s, f), "x")
		}
	}
	write(b, dir, "latest", "global_step200")
	w, err := New(Options{Dir: dir, Layout: "deepspeed"})
	if err != nil {
		b.Fatal(err)
	}
	if err := w.rescan(nil); err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	w.evaluate(now, nil)
	w.evaluate(now.Add(time.Hour), nil)
	for b.Loop() {
		w.evaluate(now.Add(time.Hour), nil)
	}
}
