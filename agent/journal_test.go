package agent

import (
	"os"
	"testing"
)

// TestJournalForgetsOldRemovedSteps: with --keep-local the journal keeps
// the steps whose files are still on disk and the newest maxRemovedSteps
// removed ones, so that after thousands of steps it is as large as after
// a few hundred (make soak measured it growing by 366 bytes a step).
func TestJournalForgetsOldRemovedSteps(t *testing.T) {
	dir := t.TempDir()
	j, err := openJournal(dir)
	if err != nil {
		t.Fatal(err)
	}
	const steps, keepLocal = 3 * maxRemovedSteps, 3
	files := []localFile{{Path: "step/__0_0.distcp", Size: 16 << 10, ModTime: 1}, {Path: "step/.metadata", Size: 512, ModTime: 2}}
	var sizeAt []int64
	for s := int64(1); s <= steps; s++ {
		if err := j.add(committedEntry{Step: s, Root: "step", Files: files}); err != nil {
			t.Fatal(err)
		}
		if old := s - keepLocal; old > 0 {
			if err := j.markRemoved(old); err != nil {
				t.Fatal(err)
			}
		}
		if s%maxRemovedSteps == 0 {
			info, err := os.Stat(j.f.Path())
			if err != nil {
				t.Fatal(err)
			}
			sizeAt = append(sizeAt, info.Size())
		}
	}
	if sizeAt[2] > sizeAt[1]+sizeAt[1]/50 {
		t.Errorf("journal grew from %d bytes after %d steps to %d after %d: not bounded", sizeAt[1], 2*maxRemovedSteps, sizeAt[2], steps)
	}
	// The journal read back: every step still on disk, and the newest
	// removed ones, oldest first.
	j, err = openJournal(dir)
	if err != nil {
		t.Fatal(err)
	}
	got := j.entries()
	if len(got) != maxRemovedSteps+keepLocal {
		t.Fatalf("journal holds %d steps, want %d removed + %d on disk", len(got), maxRemovedSteps, keepLocal)
	}
	for i, e := range got {
		want := int64(steps - maxRemovedSteps - keepLocal + 1 + i)
		if e.Step != want || e.Removed != (i < maxRemovedSteps) || len(e.Files) != len(files) {
			t.Fatalf("entry %d: step %d removed %v with %d files, want step %d removed %v", i, e.Step, e.Removed, len(e.Files), want, i < maxRemovedSteps)
		}
	}
	for _, s := range []int64{1, steps - maxRemovedSteps - keepLocal} {
		if _, ok := j.get(s); ok {
			t.Errorf("step %d, removed long ago, is still in the journal", s)
		}
	}
}
