package detect

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// nemoSave writes one folder of a NeMo 2 save as nemo2.trace orders it:
// the marker beside the folder first, then DCP's shards and record, then
// weights/metadata.json and context/ (after .metadata, outside the DCP
// folder). The marker is left for the caller to remove.
func nemoSave(t *testing.T, dir, folder string) {
	t.Helper()
	write(t, dir, folder+nemoUnfinished, "")
	copyRecord(t, "world2", dir, folder+"/weights")
	write(t, dir, folder+"/weights/common.pt", "common")
	write(t, dir, folder+"/weights/metadata.json", `{"sharded_backend": "torch_dist"}`)
	write(t, dir, folder+"/context/io.json", "{}")
	write(t, dir, folder+"/context/model.yaml", "model: gpt")
}

func unmark(t *testing.T, dir, folder string) {
	t.Helper()
	if err := os.Remove(filepath.Join(dir, folder+nemoUnfinished)); err != nil {
		t.Fatal(err)
	}
}

// folderFiles counts the files of a step under folder/.
func folderFiles(s Step, folder string) int {
	n := 0
	for _, f := range s.Files {
		if strings.HasPrefix(f.RelPath, folder+"/") {
			n++
		}
	}
	return n
}

// TestNeMoMarkerProof: with a settle window of an hour, NeMo's order with
// saves 0.5 s apart. A step whose folders' "-unfinished" markers ferry saw
// and then saw removed, every file closed, is complete at once, with both
// folders; NeMo's rotation deleting a folder of it afterwards reports it
// changed and never completes what is left; a step whose -last save was
// killed (its marker left, or its folder not started) never completes, nor
// does one whose file is newer than its markers' removal, nor what is left
// of a step whose killed -last copy the rotation removed.
func TestNeMoMarkerProof(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("close-write detection uses Linux inotify")
	}
	dir := t.TempDir()
	opts := runOpts(dir, "dcp")
	opts.Settle, opts.CloseWrite, opts.Debounce = time.Hour, true, DefaultDebounce
	w := newWatcher(t, opts)
	r := start(t, w)
	waitEvals(t, w, 1)
	const s100, s200 = "default--step=100", "default--step=200"

	// Async NeMo: the -last save's marker comes before the top-k's goes.
	nemoSave(t, dir, s100)
	nemoSave(t, dir, s100+nemoLast)
	unmark(t, dir, s100)
	unmark(t, dir, s100+nemoLast)
	ev := r.expect(Complete, 100)
	if folderFiles(ev.Step, s100) != 7 || folderFiles(ev.Step, s100+nemoLast) != 7 {
		t.Fatalf("step 100 reported with %d files of %s and %d of its -last copy, want 7 and 7", folderFiles(ev.Step, s100), s100, folderFiles(ev.Step, s100+nemoLast))
	}

	// 0.5 s later step 200, then the rotation of 100's -last copy,
	// bracketed by its own marker.
	time.Sleep(500 * time.Millisecond)
	nemoSave(t, dir, s200)
	nemoSave(t, dir, s200+nemoLast)
	unmark(t, dir, s200)
	unmark(t, dir, s200+nemoLast)
	write(t, dir, s100+nemoLast+nemoUnfinished, "")
	if err := os.RemoveAll(filepath.Join(dir, s100+nemoLast)); err != nil {
		t.Fatal(err)
	}
	unmark(t, dir, s100+nemoLast)
	got := map[int64]Event{}
	for len(got) < 2 {
		ev := r.next()
		got[ev.Step.Number] = ev
	}
	if ev := got[200]; ev.Kind != Complete || folderFiles(ev.Step, s200+nemoLast) != 7 {
		t.Fatalf("step 200: %v with %d files of its -last copy, want Complete with 7", ev.Kind, folderFiles(ev.Step, s200+nemoLast))
	}
	if ev := got[100]; ev.Kind != Deleted || !errors.Is(ev.Err, ErrChanged) {
		t.Fatalf("step 100 after the rotation of its -last copy: %v (%v), want Deleted, changed", ev.Kind, ev.Err)
	}

	// Killed saves: 300's -last save killed with its marker left; 400's
	// -last save killed before a shard was written (its marker only);
	// 500 finished, but a file of it is newer than its markers' removal.
	for _, s := range []string{"default--step=300", "default--step=300-last", "default--step=400", "default--step=500", "default--step=500-last"} {
		nemoSave(t, dir, s)
	}
	write(t, dir, "default--step=400-last"+nemoUnfinished, "")
	write(t, dir, "default--step=400-last/weights/common.pt", "common")
	setTime(t, filepath.Join(dir, "default--step=500-last/context/io.json"), time.Now().Add(time.Minute))
	for _, s := range []string{"default--step=300", "default--step=400", "default--step=500", "default--step=500-last"} {
		unmark(t, dir, s)
	}
	quiet(t, r, 3*time.Second)

	// The rotation removes 300's killed -last copy, its marker still
	// there: the top-k folder left is no state the trainer completed.
	write(t, dir, "default--step=300-last"+nemoUnfinished, "")
	if err := os.RemoveAll(filepath.Join(dir, "default--step=300-last")); err != nil {
		t.Fatal(err)
	}
	unmark(t, dir, "default--step=300-last")
	quiet(t, r, 2*time.Second)
}

// quiet fails the test if r reports anything within d.
func quiet(t *testing.T, r *running, d time.Duration) {
	t.Helper()
	select {
	case ev := <-r.events:
		t.Fatalf("%v step %d (%d files, %v): a step NeMo did not finish, or a folder of a finished one, reported", ev.Kind, ev.Step.Number, len(ev.Step.Files), ev.Err)
	case <-time.After(d):
	}
}
