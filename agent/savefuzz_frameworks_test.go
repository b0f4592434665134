package agent

import (
	"fmt"
	"os"
	"path"
	"strconv"
	"strings"

	"github.com/ferrylabs/ferry/internal/dcprecord/dcprecordtest"
)

// Save orders read from the frameworks' source (issue 46), replayed by
// the fuzzer with its kills, gaps, rollbacks and cleanups.

// dcpRecord writes folder w's .metadata as DCP's coordinator does once
// every rank reported its writes (torch 2.6 filesystem.py finish): a
// record naming each shard and the end of its last item, as .metadata.tmp
// renamed into place.
func (f *fz) dcpRecord(w string) {
	if f.dead {
		return
	}
	sizes := map[string]int64{}
	entries, _ := os.ReadDir(f.abs(w))
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".distcp") {
			if fi, err := e.Info(); err == nil {
				sizes[e.Name()] = fi.Size()
			}
		}
	}
	f.text(w+"/.metadata.tmp", string(dcprecordtest.Encode(sizes)))
	f.rename(w+"/.metadata.tmp", w+"/.metadata")
}

// nemoFuzzLayout: NeMo 2's ModelCheckpoint with torch_dist
// (nemo/lightning/pytorch/callbacks/model_checkpoint.py): rank 0 touches
// "<name>-unfinished" beside the checkpoint, the ranks save weights/ as
// DCP (.metadata last), rank 0 then writes weights/metadata.json and the
// context/ folder, and removes the unfinished marker when the save is
// final.
func nemoFuzzLayout() fuzzLayout {
	dir := func(n int64) string { return fmt.Sprintf("model-step=%d", n) }
	return fuzzLayout{
		name: "nemo2", dir: dir,
		save: func(f *fz, n int64) {
			d := dir(n)
			f.text(d+"-unfinished", "")
			for _, r := range f.ranks() {
				f.file(fmt.Sprintf("%s/weights/__%d_0.distcp", d, r))
				f.sleep(f.gap())
			}
			f.dcpRecord(d + "/weights")
			f.text(d+"/weights/metadata.json", `{"sharded_backend": "torch_dist"}`)
			f.sleep(f.gap())
			f.text(d+"/context/io.json", fmt.Sprintf(`{"step": %d}`, n))
			f.text(d+"/context/model.yaml", "model: gpt")
			f.sleep(f.gap())
			if !f.dead && !f.next() {
				_ = os.Remove(f.abs(d + "-unfinished"))
				f.note("  remove %s-unfinished", d)
			}
			if !f.dead {
				f.completed(strconv.FormatInt(n, 10), d)
			}
		},
		cleanup: func(f *fz, n int64) { f.remove(dir(n) + "/weights/__0_0.distcp") },
	}
}

// lightningFuzzLayout: Lightning's FSDP and ModelParallel strategies save
// a sharded checkpoint as the folder "epoch=0-step=N.ckpt": the DCP save,
// then rank 0's meta.pt (save_checkpoint: _distributed_checkpoint_save,
// then torch.save(checkpoint, path / "meta.pt")).
func lightningFuzzLayout() fuzzLayout {
	dir := func(n int64) string { return fmt.Sprintf("epoch=0-step=%d.ckpt", n) }
	return fuzzLayout{
		name: "lightning", dir: dir,
		save: func(f *fz, n int64) {
			d := dir(n)
			for _, r := range f.ranks() {
				f.file(fmt.Sprintf("%s/__%d_0.distcp", d, r))
				f.sleep(f.gap())
			}
			f.dcpRecord(d)
			f.file(path.Join(d, "meta.pt"))
			if !f.dead {
				f.completed(strconv.FormatInt(n, 10), d)
			}
		},
		cleanup: func(f *fz, n int64) { f.remove(dir(n) + "/meta.pt") },
	}
}
