package detect

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// saveComposerBatch writes batch b as Composer does before it repoints
// its link: ep0-ba{b}-rank0.pt, or with sharded a DCP folder ep0-ba{b}
// (a real torch 2.6 save, dated now, .metadata last). It returns the
// name rank 0's link would name.
func saveComposerBatch(t *testing.T, dir string, b int64, sharded bool) string {
	t.Helper()
	name := "ep0-ba" + itoa(b)
	if !sharded {
		name += "-rank0.pt"
		write(t, dir, name, "batch "+itoa(b))
		return name
	}
	copyRecord(t, "world2", dir, name)
	now := time.Now()
	for _, f := range []string{"__0_0.distcp", "__1_0.distcp", dcpMetadata} {
		now = now.Add(10 * time.Millisecond)
		setTime(t, filepath.Join(dir, name, f), now)
	}
	return name
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// relink removes rank 0's link and, when target is not "", links it
// again: Composer's os.remove then os.symlink.
func relink(t *testing.T, dir, target string) {
	t.Helper()
	if err := os.Remove(filepath.Join(dir, "latest-rank0.pt")); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	if target != "" {
		symlink(t, dir, "latest-rank0.pt", target)
	}
}

// TestComposerKilledBetweenUnlinkAndLink: Composer repoints
// latest-rank0.pt by removing it and then linking the new checkpoint; a
// save killed between the two leaves no link at all
// (testdata/saveorders/composer.trace, composer-sharded.trace). Once the
// watcher has seen the links, a checkpoint no link names is not
// complete: batch 200 is never reported (before, the settle window
// committed the file and .metadata alone the folder), and the next save,
// linked, is.
func TestComposerKilledBetweenUnlinkAndLink(t *testing.T) {
	for _, sharded := range []bool{false, true} {
		t.Run(map[bool]string{false: "file", true: "sharded"}[sharded], func(t *testing.T) {
			dir := t.TempDir()
			w := newWatcher(t, Options{Dir: dir, Layout: "composer", Settle: 300 * time.Millisecond, Debounce: 50 * time.Millisecond})
			r := start(t, w)
			<-w.Ready()
			relink(t, dir, saveComposerBatch(t, dir, 100, sharded))
			r.expect(Complete, 100)
			if !w.Linked() {
				t.Fatal("Linked: false after a latest-rank link was seen")
			}
			saveComposerBatch(t, dir, 200, sharded)
			relink(t, dir, "") // killed here
			r.noVersion(2*time.Second, "for batch 200, whose save was killed before its link")
			time.Sleep(600 * time.Millisecond) // the job restarts
			relink(t, dir, saveComposerBatch(t, dir, 300, sharded))
			r.expect(Complete, 300)
			r.noVersion(time.Second, "for batch 200 once batch 300 is linked")
		})
	}
}

// TestComposerLinkedAcrossRestart: after a restart only Options.Linked
// (the agent's journal) says the folder's checkpoints are linked. With
// it a batch no link names is held, file or folder; without it (links
// never used: save_latest_filename=None) the old rules decide.
func TestComposerLinkedAcrossRestart(t *testing.T) {
	for _, sharded := range []bool{false, true} {
		dir := t.TempDir()
		saveComposerBatch(t, dir, 100, sharded)
		saveComposerBatch(t, dir, 200, sharded)
		age(t, dir)
		c := candidates(t, Options{Dir: dir, Layout: "composer", Linked: true})[200]
		if !strings.HasPrefix(c.Held, "no latest-rank link names batch 200") {
			t.Errorf("sharded %v, linked: held %q, want it held for want of a link", sharded, c.Held)
		}
		if c := candidates(t, Options{Dir: dir, Layout: "composer"})[200]; !c.Finished || c.Held != "" {
			t.Errorf("sharded %v, never linked: finished %v held %q (%s)", sharded, c.Finished, c.Held, c.Waiting)
		}
		relink(t, dir, map[bool]string{false: "ep0-ba200-rank0.pt", true: "ep0-ba200"}[sharded])
		if c := candidates(t, Options{Dir: dir, Layout: "composer", Linked: true})[200]; !c.Finished || c.Held != "" {
			t.Errorf("sharded %v, linked to 200: finished %v held %q (%s)", sharded, c.Finished, c.Held, c.Waiting)
		}
	}
}
