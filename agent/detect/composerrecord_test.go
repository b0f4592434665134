package detect

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestComposerLinkNamesMissingFile: a rank's latest link names the file
// it saved before repointing it; a step where that file is missing is
// held, naming the link and the file. Before, the other ranks' files
// were the step.
func TestComposerLinkNamesMissingFile(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "ep0-ba100-rank0.pt", "rank 0")
	write(t, dir, "ep0-ba100-rank1.pt", "rank 1")
	age(t, dir)
	symlink(t, dir, "latest-rank0.pt", "ep0-ba100-rank0.pt")
	symlink(t, dir, "latest-rank1.pt", "ep0-ba100-rank1.pt")
	if c := candidates(t, Options{Dir: dir, Layout: "composer"})[100]; !c.Finished || c.Held != "" {
		t.Fatalf("both ranks' files: finished %v held %q", c.Finished, c.Held)
	}
	if err := os.Remove(filepath.Join(dir, "ep0-ba100-rank1.pt")); err != nil {
		t.Fatal(err)
	}
	c := candidates(t, Options{Dir: dir, Layout: "composer"})[100]
	want := "record: latest-rank1.pt names ep0-ba100-rank1.pt, which is not here"
	if !strings.Contains(c.Held, want) {
		t.Fatalf("held %q, want %q", c.Held, want)
	}
}

// TestComposerShardedRecord: a sharded Composer checkpoint folder's
// .metadata is DCP's record: a shard of another size keeps the step from
// completing, naming the file and both sizes.
func TestComposerShardedRecord(t *testing.T) {
	dir := t.TempDir()
	copyRecord(t, "world2", dir, "ep0-ba100")
	symlink(t, dir, "latest-rank0.pt", "ep0-ba100")
	c := candidates(t, Options{Dir: dir, Layout: "composer"})[100]
	if !c.Finished || len(c.Step.Expect) == 0 {
		t.Fatalf("whole sharded save: finished %v (%s), expect %v", c.Finished, c.Waiting, c.Step.Expect)
	}
	shard := filepath.Join(dir, "ep0-ba100", "__1_0.distcp")
	st, _ := os.Stat(shard)
	if err := os.Truncate(shard, st.Size()/2); err != nil {
		t.Fatal(err)
	}
	setTime(t, shard, st.ModTime())
	setTime(t, filepath.Join(dir, "ep0-ba100"), time.Now().Add(-time.Hour+time.Second))
	c = candidates(t, Options{Dir: dir, Layout: "composer"})[100]
	if c.Finished || !c.Disagrees || !strings.Contains(c.Waiting, "record: ep0-ba100/__1_0.distcp is ") {
		t.Fatalf("torn shard: finished %v disagrees %v, waiting %q", c.Finished, c.Disagrees, c.Waiting)
	}
}

// TestComposerShardedWaitsForItsLink: Composer v0.32.1 repoints rank 0's
// latest-rank0.pt at a sharded folder after the DCP save and its barriers
// (testdata/saveorders/composer-sharded.trace); a folder whose .metadata
// is written while the link still names an earlier batch is a save that
// has not returned (the trace replay, killed between .metadata and the
// link, found batch 200 committed). Once the link names it, it is
// complete; without any link, .metadata alone decides.
func TestComposerShardedWaitsForItsLink(t *testing.T) {
	dir := t.TempDir()
	copyRecord(t, "world2", dir, "ep0-ba100")
	copyRecord(t, "world2", dir, "ep0-ba200")
	c := candidates(t, Options{Dir: dir, Layout: "composer"})[200]
	if !c.Finished || c.Held != "" {
		t.Fatalf("no link at all: finished %v held %q (%s)", c.Finished, c.Held, c.Waiting)
	}
	symlink(t, dir, "latest-rank0.pt", "ep0-ba100")
	c = candidates(t, Options{Dir: dir, Layout: "composer"})[200]
	if c.Held != "latest-rank0.pt still names batch 100" {
		t.Fatalf("link naming batch 100: finished %v held %q", c.Finished, c.Held)
	}
	if err := os.Remove(filepath.Join(dir, "latest-rank0.pt")); err != nil {
		t.Fatal(err)
	}
	symlink(t, dir, "latest-rank0.pt", "ep0-ba200")
	if c := candidates(t, Options{Dir: dir, Layout: "composer"})[200]; !c.Finished || c.Held != "" {
		t.Fatalf("link naming batch 200: finished %v held %q (%s)", c.Finished, c.Held, c.Waiting)
	}
}
