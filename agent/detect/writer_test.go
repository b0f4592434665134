package detect

import (
	"runtime"
	"testing"
	"time"
)

// TestSettleNeverWithWriter: a rank that writes half its shard and keeps
// the file open, quiet for many settle windows, never has its half file
// reported, in the settle-window paths (markers ignored, as on a node
// that never sees DCP's .metadata; and with the marker but no close-write
// detection); once it writes the rest and closes, the whole file is
// reported. The case: node 1 of a multi-node DCP job uploaded a
// 2 MiB half of a 4 MiB shard after its 5 s settle window.
func TestSettleNeverWithWriter(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the kernel's read lease tells a file with a writer on Linux")
	}
	for _, tc := range []struct {
		name     string
		noMarker bool
	}{{"no-marker", true}, {"marker", false}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			opts := runOpts(dir, "dcp")
			opts.Settle = 150 * time.Millisecond
			opts.NoMarker = tc.noMarker
			w := newWatcher(t, opts)
			r := start(t, w)
			waitEvals(t, w, 1)
			mkdirs(t, w, dir, "step_100")
			closeFile(t, create(t, dir, "step_100/__0_0.distcp", "rank 0 whole"))
			held := create(t, dir, "step_100/__1_0.distcp", "first half;")
			if !tc.noMarker {
				closeFile(t, create(t, dir, "step_100/.metadata", "md"))
			}
			// Ten settle windows with the half file quiet and open.
			deadline := time.After(10 * opts.Settle)
			for waiting := true; waiting; {
				select {
				case ev := <-r.events:
					t.Fatalf("%v step %d reported while __1_0.distcp has a writer (%d bytes of it)", ev.Kind, ev.Step.Number, sizeOf(ev, "step_100/__1_0.distcp"))
				case <-deadline:
					waiting = false
				}
			}
			p := w.Pending()
			if len(p) != 1 || p[0].State != "waiting" || p[0].Reason == "" {
				t.Fatalf("pending %+v, want step 100 waiting for its writer", p)
			}
			if _, err := held.WriteString("second half"); err != nil {
				t.Fatal(err)
			}
			if !tc.noMarker {
				// DCP renames a new .metadata after the shards.
				time.Sleep(10 * time.Millisecond)
				closeFile(t, create(t, dir, "step_100/.metadata", "md2"))
			}
			closeFile(t, held)
			ev := r.expect(Complete, 100)
			if got, want := sizeOf(ev, "step_100/__1_0.distcp"), int64(len("first half;second half")); got != want {
				t.Fatalf("step 100 reported with __1_0.distcp at %d bytes, want %d", got, want)
			}
		})
	}
}

func sizeOf(ev Event, rel string) int64 {
	for _, f := range ev.Step.Files {
		if f.RelPath == rel {
			return f.Size
		}
	}
	return -1
}
