package restore

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/agent/detect"
	"github.com/ferrylabs/ferry/internal/store"
)

// An agent started on a restored folder sees the restored step as a
// finished save (issue 46 item 4): its .metadata is not older than any
// shard and the folder did not change after it. Two cases: a fresh target,
// and one holding the step's .metadata already (right bytes, an hour old)
// with a shard of other bytes, as on a node restarted after a restore that
// got half way. Before, the second case always left .metadata an hour
// older than the new shard ("saved again after its marker ... torn"), and
// the first depended on the order the files finished in.
func TestRestoredDCPStepIsCompleteToTheDetector(t *testing.T) {
	meta := randBytes(1500, 20)
	files := []tfile{
		{path: "step-600/.metadata", data: meta},
		{path: "step-600/__0_0.distcp", data: randBytes(2*mib, 21)},
		{path: "step-600/__1_0.distcp", data: randBytes(mib+5, 22)},
	}
	for _, held := range []bool{false, true} {
		name := "fresh"
		if held {
			name = "marker_held"
		}
		t.Run(name, func(t *testing.T) {
			st := store.NewMemStore()
			commit(t, st, 600, files, nil)
			dir := t.TempDir()
			if held {
				old := time.Now().Add(-time.Hour)
				writeFile(t, filepath.Join(dir, "step-600/.metadata"), meta)
				writeFile(t, filepath.Join(dir, "step-600/__1_0.distcp"), []byte("a shard of an earlier save"))
				os.Chtimes(filepath.Join(dir, "step-600/.metadata"), old, old)
			}
			res, err := Restore(context.Background(), Options{Store: st, Prefix: testPrefix, Dir: dir, Step: LatestStep, ChunkSize: mib})
			if err != nil {
				t.Fatal(err)
			}
			if held && res.Kept != 1 {
				t.Fatalf("want .metadata kept: %+v", res)
			}
			time.Sleep(20 * time.Millisecond) // past the settle window below
			w, err := detect.New(detect.Options{Dir: dir, Layout: "dcp", Settle: 10 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			steps, err := w.Scan()
			if err != nil {
				t.Fatal(err)
			}
			if len(steps) != 1 || steps[0].Number != 600 || len(steps[0].Files) != 3 {
				t.Fatalf("the detector finds %+v, want step 600 complete with 3 files", steps)
			}
			m, _ := os.Stat(filepath.Join(dir, "step-600/.metadata"))
			for _, f := range files[1:] {
				fi, _ := os.Stat(filepath.Join(dir, f.path))
				if fi.ModTime().After(m.ModTime()) {
					t.Errorf("%s is newer than .metadata", f.path)
				}
			}
		})
	}
}
