package detect

import (
	"fmt"
	"testing"
	"time"
)

// TestTornCacheForgetsGoneFiles: the verdicts cached for files no longer
// in the tree (deleted by --keep-local or the trainer, or rewritten) are
// swept once the cache outgrows what is on disk, so an agent that saw
// thousands of steps holds about the files present.
func TestTornCacheForgetsGoneFiles(t *testing.T) {
	e := &engine{tree: newTree(t.TempDir())}
	mtime := time.Unix(100, 0)
	for i := range 3 {
		e.tree.set(Entry{Path: fmt.Sprintf("step-9000/__%d_0.distcp", i), Size: 10, ModTime: mtime})
	}
	c := &Candidate{}
	for i := range 3 {
		c.Step.Files = append(c.Step.Files, File{RelPath: fmt.Sprintf("step-9000/__%d_0.distcp", i), Size: 10, ModTime: mtime})
	}
	// Verdicts of 3,000 steps' files, all deleted since.
	e.torn.verdicts = map[stat]string{}
	for s := range 3000 {
		e.torn.verdicts[stat{fmt.Sprintf("step-%d/__0_0.distcp", s), 10, mtime.UnixNano()}] = ""
	}
	// A file still present, but rewritten since its verdict.
	e.torn.verdicts[stat{"step-9000/__0_0.distcp", 9, mtime.UnixNano()}] = "stale"
	if p, why := e.tornFile(c); p != "" {
		t.Fatalf("tornFile: %s %s, want no torn file", p, why)
	}
	if len(e.torn.verdicts) != 3 {
		t.Errorf("cache holds %d verdicts after the sweep, want the 3 files on disk", len(e.torn.verdicts))
	}
	for _, f := range c.Step.Files {
		if _, ok := e.torn.verdicts[stat{f.RelPath, f.Size, f.ModTime.UnixNano()}]; !ok {
			t.Errorf("no verdict cached for %s, which is on disk", f.RelPath)
		}
	}
}
