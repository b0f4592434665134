package detect

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// ferry push takes a directory as the watcher sees it: links inside kept
// (an absolute one rewritten relative to the link), a link leaving the
// directory skipped and listed, ranks read from names.
func TestGatherSymlinks(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "ep0-ba10-rank0.pt", "rank 0")
	write(t, dir, "sub/config.json", "{}")
	symlink(t, dir, "latest-rank0.pt", "ep0-ba10-rank0.pt")
	symlink(t, dir, "outside", "/etc/passwd")
	symlink(t, dir, "abs-inside", filepath.Join(dir, "ep0-ba10-rank0.pt"))
	s, skipped, err := Gather([]string{dir}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Files) != 2 || s.Files[0].RelPath != "ep0-ba10-rank0.pt" || s.Files[1].RelPath != "sub/config.json" {
		t.Fatalf("files = %+v", s.Files)
	}
	if f := s.Files[0]; f.Rank == nil || *f.Rank != 0 || f.Size != 6 || f.LocalPath != filepath.Join(dir, "ep0-ba10-rank0.pt") {
		t.Errorf("file = %+v, want rank 0, 6 bytes, its local path", f)
	}
	if s.Files[1].Rank != nil {
		t.Errorf("config.json has rank %d, want none", *s.Files[1].Rank)
	}
	got := map[string]string{}
	for _, l := range s.Symlinks {
		got[l.RelPath] = l.Target
	}
	if len(got) != 2 || got["latest-rank0.pt"] != "ep0-ba10-rank0.pt" || got["abs-inside"] != "ep0-ba10-rank0.pt" {
		t.Fatalf("symlinks = %v, want latest-rank0.pt and abs-inside -> ep0-ba10-rank0.pt", got)
	}
	if len(skipped) != 1 || !strings.HasPrefix(skipped[0], "outside") {
		t.Fatalf("skipped = %v, want the link to /etc/passwd", skipped)
	}
}

// Files named one by one are recorded under their base names; two with the
// same name, or a folder among them, are refused.
func TestGatherFiles(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	write(t, a, "model-rank1.pt", "m")
	write(t, b, "optim.pt", "o")
	write(t, b, "model-rank1.pt", "other")
	s, _, err := Gather([]string{filepath.Join(b, "optim.pt"), filepath.Join(a, "model-rank1.pt")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Files) != 2 || s.Files[0].RelPath != "model-rank1.pt" || s.Files[0].LocalPath != filepath.Join(a, "model-rank1.pt") || *s.Files[0].Rank != 1 {
		t.Fatalf("files = %+v", s.Files)
	}
	if _, _, err := Gather([]string{filepath.Join(a, "model-rank1.pt"), filepath.Join(b, "model-rank1.pt")}, nil); err == nil || !strings.Contains(err.Error(), "same name") {
		t.Errorf("two files named alike: %v", err)
	}
	if _, _, err := Gather([]string{filepath.Join(b, "optim.pt"), a}, nil); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a folder among files: %v", err)
	}
	if _, _, err := Gather([]string{filepath.Join(a, "missing")}, nil); err == nil || !os.IsNotExist(errors.Unwrap(err)) {
		t.Errorf("a missing source: %v", err)
	}
}

// TestLinkCheckNeverLooksOutside: a link whose target passes through a
// folder outside the directory before coming back into it is skipped
// whether or not that folder exists. Its check resolves links beneath the
// directory only: the agent often runs as root, and resolving such a
// chain with root's rights told the trainer, through the manifest,
// whether a folder it cannot read exists (/root/.ssh, say). Chains that
// stay inside, absolute or relative, are still followed.
func TestLinkCheckNeverLooksOutside(t *testing.T) {
	dir, private := t.TempDir(), t.TempDir()
	write(t, dir, "model.pt", "w")
	write(t, dir, "sub/x", "x")
	write(t, private, "sub/file", "in a folder the trainer cannot list")
	back := "/../../" + filepath.Base(dir) + "/model.pt"
	up := "../" + filepath.Base(private)
	symlink(t, dir, "yes-rel", up+"/sub"+back)
	symlink(t, dir, "no-rel", up+"/nosub"+back)
	symlink(t, dir, "yes-abs", private+"/sub"+back)
	symlink(t, dir, "no-abs", private+"/nosub"+back)
	symlink(t, dir, "out-and-back", "../"+filepath.Base(dir)+"/model.pt")
	symlink(t, dir, "abs-inside", dir+"/sub/../model.pt")
	symlink(t, dir, "chain", "via/x")
	symlink(t, dir, "via", "sub")
	s, skipped, err := Gather([]string{dir}, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, l := range s.Symlinks {
		got[l.RelPath] = l.Target
	}
	want := map[string]string{"abs-inside": "model.pt", "chain": "via/x", "via": "sub"}
	if len(got) != len(want) || got["abs-inside"] != want["abs-inside"] || got["chain"] != want["chain"] || got["via"] != want["via"] {
		t.Errorf("links kept %v, want %v", got, want)
	}
	if len(skipped) != 5 {
		t.Errorf("skipped %v, want the five links through a folder outside", skipped)
	}
}
