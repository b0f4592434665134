package restore

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/manifest"
)

// mf builds a manifest of files (by path) and links ("path->target").
func mf(entries ...string) *manifest.Manifest {
	m := &manifest.Manifest{Format: manifest.FormatVersion, Step: 1, Created: time.Now()}
	for _, e := range entries {
		if p, target, ok := strings.Cut(e, "->"); ok {
			m.Symlinks = append(m.Symlinks, manifest.Symlink{Path: p, Target: target})
			continue
		}
		m.Files = append(m.Files, manifest.File{Path: e, Size: 1, BLAKE3: strings.Repeat("0", 64),
			Key: manifest.DataKey("p", 1, "a", e)})
	}
	return m
}

// planErr plans m into dir and checks the error mentions want (or that
// planning succeeds, for want == "").
func planErr(t *testing.T, dir string, m *manifest.Manifest, want string) *plan {
	t.Helper()
	p, err := makePlan(m, dir, nil, nil)
	switch {
	case want == "" && err != nil:
		t.Fatalf("plan: %v", err)
	case want != "" && err == nil:
		t.Fatalf("plan accepted the manifest, want an error mentioning %q", want)
	case want != "" && !strings.Contains(err.Error(), want):
		t.Fatalf("plan: %v, want an error mentioning %q", err, want)
	}
	return p
}

// snapshot lists everything under dir, to show planning wrote nothing.
func snapshot(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil {
			b.WriteString(p + " " + fi.Mode().String() + "\n")
		}
		return nil
	})
	return b.String()
}

func TestPlanRejectsUnsafePaths(t *testing.T) {
	for _, tc := range []struct {
		name string
		m    *manifest.Manifest
		want string
	}{
		{"dotdot", mf("../x"), "not a clean relative path"},
		{"inner dotdot", mf("a/../../x"), "not a clean relative path"},
		{"absolute", mf("/etc/passwd"), "not a clean relative path"},
		{"dot", mf("./x"), "not a clean relative path"},
		{"empty element", mf("a//x"), "not a clean relative path"},
		{"backslash", mf(`a\..\x`), "not a clean relative path"},
		{"empty", mf(""), "not a clean relative path"},
		{"duplicate", mf("a/x", "b", "a/x"), "a/x: same file on disk as a/x"},
		{"file and link on one path", mf("x", "x->y"), "same file on disk"},
		{"below a file", mf("a", "a/x"), "a/x: its path on disk passes through a"},
		{"below a link", mf("d->sub", "sub/f", "d/x"), "passes through d"},
		{"absolute link", mf("l->/etc"), "not a relative path"},
		{"link escapes", mf("sub/l->../../x"), "resolves outside"},
		{"link to root's parent", mf("l->.."), "resolves outside"},
		// Each link is inside on its own (the decoder accepts this), but e
		// goes through l, which lands higher than it looks: p/q/e ->
		// l/../.. is r/../.. on disk, the target's parent.
		{"link chain escapes", mf("p/q/l->../../r", "p/q/e->l/../..", "r/f"), "p/q/e: link target"},
		{"link loop", mf("a->b", "b->a"), "too many levels"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "target")
			planErr(t, dir, tc.m, tc.want)
			if _, err := os.Lstat(dir); !os.IsNotExist(err) {
				t.Errorf("planning created the target: %v", err)
			}
		})
	}
}

func TestPlanChainEscapePassesDecoder(t *testing.T) {
	// The reason the planner resolves links itself.
	m := mf("p/q/l->../../r", "p/q/e->l/../..", "r/f")
	if err := manifest.Validate(m, "p"); err != nil {
		t.Fatalf("the decoder now rejects the chain (%v): keep the planner's check anyway", err)
	}
}

func TestPlanAcceptsLinksInside(t *testing.T) {
	dir := t.TempDir()
	m := mf("a/b/c/f", "a/b/up->../../x", "x", "l->a/b", "deep->l/c/f", "via->l/../b/c", "sub/dangling->missing/../../x", "sub/dangle->../x/y/..")
	p := planErr(t, dir, m, "")
	if len(p.files) != 2 || len(p.links) != 6 {
		t.Fatalf("plan %+v", p)
	}
}

func TestPlanMissingTargetIsCreatedParentsFirst(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "new", "target")
	p := planErr(t, dir, mf("a/b/f", "a/c/f", "z"), "")
	real, _ := filepath.EvalSymlinks(base)
	if p.root != filepath.Join(real, "new", "target") {
		t.Errorf("root %s", p.root)
	}
	want := []string{"a", filepath.FromSlash("a/b"), filepath.FromSlash("a/c")}
	if strings.Join(p.mkdir, " ") != strings.Join(want, " ") {
		t.Errorf("mkdir %v, want %v", p.mkdir, want)
	}
	if _, err := os.Lstat(filepath.Join(base, "new")); !os.IsNotExist(err) {
		t.Errorf("planning created directories")
	}
}

func TestPlanExistingSymlinks(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, dir, elsewhere string)
		m     *manifest.Manifest
		want  string // error, or "=path" for where the first file lands
	}{
		{"dir link outside", func(t *testing.T, dir, elsewhere string) {
			os.Symlink(elsewhere, filepath.Join(dir, "sub"))
		}, mf("sub/x"), "sub/x: parent directory resolves outside the target directory: sub is a symlink to "},
		{"relative dir link outside", func(t *testing.T, dir, elsewhere string) {
			os.Symlink("../"+filepath.Base(elsewhere), filepath.Join(dir, "sub"))
		}, mf("sub/x"), "resolves outside"},
		{"nested dir link outside", func(t *testing.T, dir, elsewhere string) {
			os.MkdirAll(filepath.Join(dir, "a/b"), 0o755)
			os.Symlink("../../..", filepath.Join(dir, "a/b/c"))
		}, mf("a/b/c/d/x"), "resolves outside"},
		{"dir link inside", func(t *testing.T, dir, elsewhere string) {
			os.Mkdir(filepath.Join(dir, "real"), 0o755)
			os.Symlink("real", filepath.Join(dir, "sub"))
		}, mf("sub/x"), "=real/x"},
		{"absolute dir link inside", func(t *testing.T, dir, elsewhere string) {
			os.Mkdir(filepath.Join(dir, "real"), 0o755)
			os.Symlink(filepath.Join(dir, "real"), filepath.Join(dir, "sub"))
		}, mf("sub/x"), "=real/x"},
		{"two paths, one file", func(t *testing.T, dir, elsewhere string) {
			os.Mkdir(filepath.Join(dir, "real"), 0o755)
			os.Symlink("real", filepath.Join(dir, "sub"))
		}, mf("real/x", "sub/x"), "sub/x: same file on disk as real/x"},
		{"through a manifest file", func(t *testing.T, dir, elsewhere string) {
			os.Symlink("f", filepath.Join(dir, "sub"))
		}, mf("f", "sub/x"), "not a directory"},
		{"regular file as parent", func(t *testing.T, dir, elsewhere string) {
			os.WriteFile(filepath.Join(dir, "a"), nil, 0o644)
		}, mf("a/x"), "a/x: a is not a directory"},
		{"directory in the way", func(t *testing.T, dir, elsewhere string) {
			os.Mkdir(filepath.Join(dir, "x"), 0o755)
		}, mf("x"), "x: a directory is in the way"},
		{"file where a link goes", func(t *testing.T, dir, elsewhere string) {
			os.WriteFile(filepath.Join(dir, "latest"), nil, 0o644)
		}, mf("f", "latest->f"), "refusing to replace a regular file"},
		{"directory where a link goes", func(t *testing.T, dir, elsewhere string) {
			os.Mkdir(filepath.Join(dir, "latest"), 0o755)
		}, mf("f", "latest->f"), "refusing to replace a directory"},
		{"manifest link through existing link outside", func(t *testing.T, dir, elsewhere string) {
			os.Symlink(elsewhere, filepath.Join(dir, "out"))
		}, mf("l->out/x"), "l: link target \"out/x\" resolves outside"},
		{"existing file link outside is replaced", func(t *testing.T, dir, elsewhere string) {
			os.Symlink(filepath.Join(elsewhere, "x"), filepath.Join(dir, "x"))
		}, mf("x"), "=x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, elsewhere := t.TempDir(), t.TempDir()
			tc.setup(t, dir, elsewhere)
			before := snapshot(t, dir) + snapshot(t, elsewhere)
			if land, ok := strings.CutPrefix(tc.want, "="); ok {
				p := planErr(t, dir, tc.m, "")
				real, _ := filepath.EvalSymlinks(dir)
				if p.files[0].abs != filepath.Join(real, land) {
					t.Errorf("file lands at %s, want %s", p.files[0].abs, filepath.Join(real, land))
				}
			} else {
				planErr(t, dir, tc.m, tc.want)
			}
			if after := snapshot(t, dir) + snapshot(t, elsewhere); after != before {
				t.Errorf("planning changed the disk:\n%s\nwas\n%s", after, before)
			}
		})
	}
}

func TestPlanExistingLinkKeptOrReplaced(t *testing.T) {
	dir := t.TempDir()
	os.Symlink("f", filepath.Join(dir, "same"))
	os.Symlink("old", filepath.Join(dir, "other"))
	p := planErr(t, dir, mf("f", "same->f", "other->f"), "")
	if !p.links[0].keep || p.links[1].keep {
		t.Errorf("keep: same %v, other %v; want true, false", p.links[0].keep, p.links[1].keep)
	}
}

func TestPlanRanks(t *testing.T) {
	m := mf("shared", "r0", "r1")
	m.Files[1].Rank, m.Files[2].Rank = new(int), new(int)
	*m.Files[2].Rank = 1
	p, err := makePlan(m, t.TempDir(), func(f manifest.File) bool { return f.Rank == nil || *f.Rank == 1 }, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.files) != 2 || p.files[0].file.Path != "shared" || p.files[1].file.Path != "r1" {
		t.Errorf("planned %+v", p.files)
	}
}
