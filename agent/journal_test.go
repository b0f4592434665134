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

// A journal written before steps could be held out of retention reads
// with every step counted; the held state (Ahead) is saved, survives a
// reopen, and release clears it below the step that passed only.
func TestJournalAheadPersists(t *testing.T) {
	dir := t.TempDir()
	old := `{"version":1,"committed":[{"step":100,"root":"step-100","committed":"2026-01-02T03:04:05Z","files":[{"path":"step-100/.metadata","size":3,"mtime_ns":1}]}]}`
	if err := os.WriteFile(dir+"/journal.json", []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	j, err := openJournal(dir)
	if err != nil {
		t.Fatal(err)
	}
	if e, ok := j.get(100); !ok || e.Ahead {
		t.Fatalf("an old journal's step 100: %+v %v", e, ok)
	}
	for _, n := range []int64{999_000, 999_001} {
		if err := j.add(committedEntry{Step: n, Files: []localFile{{Path: "notes.bin", Size: 1}}, Ahead: true}); err != nil {
			t.Fatal(err)
		}
	}
	if j, err = openJournal(dir); err != nil {
		t.Fatal(err)
	}
	released, err := j.release(999_001)
	if err != nil || len(released) != 1 || released[0] != 999_000 {
		t.Fatalf("release below 999001: %v %v", released, err)
	}
	if j, err = openJournal(dir); err != nil {
		t.Fatal(err)
	}
	for n, want := range map[int64]bool{100: false, 999_000: false, 999_001: true} {
		if e, _ := j.get(n); e.Ahead != want {
			t.Errorf("step %d after reopening: ahead %v, want %v", n, e.Ahead, want)
		}
	}
}

// TestJournalKeepsLinked: once the watcher has seen Composer's
// latest-rank links, the journal says so, and an agent started again on
// the state dir tells its watcher (detect.Options.Linked): a save killed
// between removing its links and linking the new checkpoint, found at
// start with no link at all, is then held rather than committed by the
// settle window.
func TestJournalKeepsLinked(t *testing.T) {
	base, watch := t.TempDir(), t.TempDir()
	stateDir := AgentStateDir(base, Identity{Destination: "s3://b/p", Watch: watch})
	a, err := newTrustAgent(t, stateDir, watch)
	if err != nil {
		t.Fatal(err)
	}
	if a.watcher.Linked() || a.journal.linked() {
		t.Fatal("a fresh state dir says the checkpoints are linked")
	}
	if err := a.journal.noteLinked(); err != nil {
		t.Fatal(err)
	}
	b, err := newTrustAgent(t, stateDir, watch)
	if err != nil {
		t.Fatal(err)
	}
	if !b.watcher.Linked() {
		t.Fatal("restarted on a journal that recorded links: the watcher does not know the checkpoints are linked")
	}
}
