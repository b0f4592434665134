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
// finished save (issue 46 items 4 and 5): its .metadata is not older than
// any shard and the folder did not change after it, and each file has the
// modification time its manifest records, to the nanosecond (format 1.4),
// so that the next agent's journal and fresh-marker rule see the save the
// trainer made. The cases: a manifest without times (older writers), on a
// fresh target and on one holding the step's .metadata already (right
// bytes, an hour old) with a shard of other bytes, as on a node restarted
// after a restore that got half way; a manifest with times, in a real
// save's order, in an order where a file came after the marker (HF before
// 4.36, or a clock stepped back), in the future of the restoring machine,
// and with the marker held, newer or older than the step's files. Before,
// the held case always left .metadata an hour older than the new shard
// ("saved again after its marker ... torn"); then recorded times were
// never placed (every file got the restore's time) and a kept marker was
// always moved to the restore's time.
func TestRestoredDCPStepIsCompleteToTheDetector(t *testing.T) {
	meta := randBytes(1500, 20)
	shard0, shard1 := randBytes(2*mib, 21), randBytes(mib+5, 22)
	base := time.Now().Add(-48 * time.Hour).Truncate(time.Second)
	at := func(d time.Duration) time.Time { return base.Add(d) }
	step := func(metaAt, s0At, s1At time.Time) []tfile {
		return []tfile{
			{path: "step-600/.metadata", data: meta, mtime: metaAt},
			{path: "step-600/__0_0.distcp", data: shard0, mtime: s0At},
			{path: "step-600/__1_0.distcp", data: shard1, mtime: s1At},
		}
	}
	future := time.Now().Add(time.Hour)
	cases := []struct {
		name  string
		files []tfile
		// held, when set, is the time of a .metadata with the right
		// bytes already in the target (with a shard of other bytes).
		held time.Time
		// want is each file's exact time on disk; nil: placed at the
		// restore's time (no time recorded, or a future one).
		want map[string]time.Time
	}{
		{name: "no_times", files: step(time.Time{}, time.Time{}, time.Time{})},
		{name: "no_times_marker_held", files: step(time.Time{}, time.Time{}, time.Time{}), held: time.Now().Add(-time.Hour)},
		{name: "recorded", files: step(at(time.Second+7), at(1), at(250*time.Millisecond+3)),
			want: map[string]time.Time{".metadata": at(time.Second + 7), "__0_0.distcp": at(1), "__1_0.distcp": at(250*time.Millisecond + 3)}},
		// A kept marker keeps its own time while no file is newer...
		{name: "recorded_marker_held", files: step(at(time.Second+7), at(1), at(2)), held: at(time.Hour + 11),
			want: map[string]time.Time{".metadata": at(time.Hour + 11), "__0_0.distcp": at(1), "__1_0.distcp": at(2)}},
		// ... and moves up to the newest file when one is.
		{name: "recorded_marker_held_older", files: step(at(time.Second+7), at(1), at(2*time.Second+5)), held: at(-time.Hour),
			want: map[string]time.Time{".metadata": at(2*time.Second + 5), "__0_0.distcp": at(1), "__1_0.distcp": at(2*time.Second + 5)}},
		// A file written after the marker: the marker moves up to it.
		{name: "recorded_file_after_marker", files: step(at(5), at(2*time.Second+9), at(3)),
			want: map[string]time.Time{".metadata": at(2*time.Second + 9), "__0_0.distcp": at(2*time.Second + 9), "__1_0.distcp": at(3)}},
		{name: "recorded_in_the_future", files: step(future.Add(time.Second), future, future)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st := store.NewMemStore()
			commit(t, st, 600, c.files, nil)
			dir := t.TempDir()
			if !c.held.IsZero() {
				writeFile(t, filepath.Join(dir, "step-600/.metadata"), meta)
				writeFile(t, filepath.Join(dir, "step-600/__1_0.distcp"), []byte("a shard of an earlier save"))
				if err := os.Chtimes(filepath.Join(dir, "step-600/.metadata"), c.held, c.held); err != nil {
					t.Fatal(err)
				}
			}
			before := time.Now()
			res, err := Restore(context.Background(), Options{Store: st, Prefix: testPrefix, Dir: dir, Step: LatestStep, ChunkSize: mib})
			if err != nil {
				t.Fatal(err)
			}
			after := time.Now()
			if !c.held.IsZero() && res.Kept != 1 {
				t.Fatalf("want .metadata kept: %+v", res)
			}
			times := map[string]time.Time{}
			for _, f := range c.files {
				fi, err := os.Stat(filepath.Join(dir, f.path))
				if err != nil {
					t.Fatal(err)
				}
				times[filepath.Base(f.path)] = fi.ModTime()
			}
			for name, want := range c.want {
				if got := times[name]; got.UnixNano() != want.UnixNano() {
					t.Errorf("%s: modification time %s on disk, want %s", name, got.Format(time.RFC3339Nano), want.Format(time.RFC3339Nano))
				}
			}
			for name, got := range times {
				if c.want == nil && (got.Before(before.Add(-time.Second)) || got.After(after)) {
					t.Errorf("%s: modification time %s, want the restore's (%s .. %s)", name, got, before, after)
				}
				if name != ".metadata" && got.After(times[".metadata"]) {
					t.Errorf("%s (%s) is newer than .metadata (%s)", name, got, times[".metadata"])
				}
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
		})
	}
}
