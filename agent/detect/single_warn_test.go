package detect

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// A torch.save file cut short is left out of the single layout's versions
// only once its writer is gone (no process holds it open for writing and
// it has not changed for abandonedAfter), and only then does the agent
// warn, once per version of the file: a file read mid-write is not "left
// out", it holds the version back.
func TestSingleWarnsOnlyWhenAbandoned(t *testing.T) {
	dir := t.TempDir()
	whole := writeTorchZip(t, filepath.Join(t.TempDir(), "whole.pt"))
	p := filepath.Join(dir, "checkpoint.pt")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(whole[:len(whole)/2]); err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.WarnLevel)
	l := &singleLayout{log: zap.New(core)}
	tr := newTree(dir)
	look := func(mt time.Time) bool {
		t.Helper()
		if err := os.Chtimes(p, mt, mt); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		e := Entry{Path: "checkpoint.pt", Size: fi.Size(), ModTime: fi.ModTime()}
		tr.set(e)
		return l.abandoned(tr, &e)
	}
	now, minuteAgo := time.Now(), time.Now().Add(-time.Minute)
	if look(now) {
		t.Fatal("a torn file written a moment ago is taken as abandoned")
	}
	if look(minuteAgo) {
		t.Fatal("a torn file still open for writing is taken as abandoned")
	}
	if n := logs.Len(); n != 0 {
		t.Fatalf("%d warnings while the file is being written: %v", n, logs.All()[0].Message)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	for range 2 { // looked at twice: one warning
		if !look(minuteAgo) {
			t.Fatal("a torn file closed a minute ago is not taken as abandoned")
		}
	}
	if n := logs.FilterMessage("checkpoint file left out of the folder's versions until it is written whole").Len(); n != 1 {
		t.Fatalf("%d warnings for one abandoned version of the file, want 1", n)
	}
}
