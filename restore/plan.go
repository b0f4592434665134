package restore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/ferrylabs/ferry/internal/linkwalk"
	"github.com/ferrylabs/ferry/manifest"
)

// fileJob is one manifest file to put in place.
type fileJob struct {
	file manifest.File
	// rel is the final path relative to the root, with the symlinks above
	// it resolved; writes go through an os.Root, so a symlink swapped in
	// after planning cannot carry them outside either. abs is for messages.
	rel, abs string
	// absent is set when planning saw the file's directory missing: no
	// file can be there, so nothing needs checking.
	absent bool
	// resume is a staged copy (root-relative) an interrupted restore of
	// this file left, found by removeStale; "" when none.
	resume string

	reported int64 // bytes already reported to Progress (under restorer.mu)
}

// linkJob is one manifest symlink to put in place.
type linkJob struct {
	link     manifest.Symlink
	rel, abs string
	keep     bool // an identical link is already there
}

// plan is everything a restore will write, checked against the manifest and
// the target directory as it is before anything is written.
type plan struct {
	root  string    // target directory, symlinks resolved
	mkdir []string  // directories to create (root-relative), parents first
	files []fileJob // in manifest order
	links []linkJob
	// dangling names the links ("path -> target") whose target neither the
	// step nor the target folder holds: a link into another step.
	dangling []string
}

// makePlan checks every path the restore would write and resolves it to a
// physical location under the target directory. The manifest is untrusted:
// the decoder already checked its paths lexically, but only the disk shows
// whether an existing symlink, or one the manifest itself creates, would
// carry a write or a link outside the target directory. Nothing is written
// here, so a rejected manifest leaves the disk as it was.
func makePlan(m *manifest.Manifest, dir string, want func(manifest.File) bool, wantLink func(manifest.Symlink) bool) (*plan, error) {
	root, alias, err := resolveRoot(dir)
	if err != nil {
		return nil, err
	}
	pl := newPlanner(root, alias, len(m.Files)+len(m.Symlinks))
	p := &plan{root: root, files: make([]fileJob, 0, len(m.Files))}
	fileRel := make(map[string]bool, len(m.Files))
	rootMissing := pl.missing("")
	for _, f := range m.Files {
		if want != nil && !want(f) {
			continue
		}
		rel, err := pl.claim(f.Path)
		if err != nil {
			return nil, err
		}
		fileRel[rel] = true
		absent := rootMissing || (linkwalk.Parent(rel) != "" && pl.missing(linkwalk.Parent(rel)))
		p.files = append(p.files, fileJob{file: f, rel: filepath.FromSlash(rel), abs: filepath.Join(root, filepath.FromSlash(rel)), absent: absent})
	}
	linkRel := map[string]string{}
	for _, l := range m.Symlinks {
		if wantLink != nil && !wantLink(l) {
			continue
		}
		rel, err := pl.claim(l.Path)
		if err != nil {
			return nil, err
		}
		linkRel[rel] = l.Target
		p.links = append(p.links, linkJob{link: l, rel: filepath.FromSlash(rel), abs: filepath.Join(root, filepath.FromSlash(rel))})
	}
	// No write may pass through another entry: "a" restored as a file or a
	// link and "a/b" reached through an existing symlink would write through
	// it, or depend on which of the two is placed first.
	for rel, by := range pl.through {
		if other, ok := pl.phys[rel]; ok {
			return nil, fmt.Errorf("%s: its path on disk passes through %s, which is not a directory", by, other)
		}
	}
	if err := p.checkExisting(); err != nil {
		return nil, err
	}
	if err := p.checkLinkTargets(fileRel, linkRel, pl.dirs, pl.under); err != nil {
		return nil, err
	}
	p.mkdir = missingDirs(root, pl.dirs)
	return p, nil
}

// planner resolves manifest paths against the disk for makePlan.
type planner struct {
	root, alias string
	// Nothing is written while planning, so what the disk holds at a path
	// is looked up once: 100,000 files in a few folders cost a few lstats,
	// not one per file and parent.
	lookups map[string]lookup
	phys    map[string]string // physical rel path -> manifest path
	dirs    map[string]string // physical rel directories holding entries -> a manifest path below
	through map[string]string // every rel path a parent lookup visited -> manifest path
}

type lookup struct {
	k      linkwalk.Kind
	target string
	err    error
}

func newPlanner(root, alias string, entries int) *planner {
	return &planner{root: root, alias: alias, lookups: map[string]lookup{}, phys: make(map[string]string, entries),
		dirs: map[string]string{}, through: map[string]string{}}
}

// disk is diskLookup, once per path.
func (pl *planner) disk(rel string) (linkwalk.Kind, string, error) {
	if s, ok := pl.lookups[rel]; ok {
		return s.k, s.target, s.err
	}
	k, target, err := diskLookup(pl.root, rel)
	pl.lookups[rel] = lookup{k, target, err}
	return k, target, err
}

// missing reports whether planning saw the folder dir absent from disk.
func (pl *planner) missing(dir string) bool {
	if dir == "" {
		_, err := os.Lstat(pl.root)
		return errors.Is(err, fs.ErrNotExist)
	}
	s, ok := pl.lookups[dir]
	return ok && s.err == nil && s.k == linkwalk.Missing
}

func (pl *planner) under(target string) (string, bool) {
	return linkwalk.UnderRoot(target, pl.root, pl.alias)
}

// claim resolves a manifest path's parent on disk and records the physical
// path the entry will take, refusing one that leaves the root or that
// another entry already takes.
func (pl *planner) claim(mpath string) (string, error) {
	if err := checkRel(mpath); err != nil {
		return "", err
	}
	walk := linkwalk.Walk{Lookup: pl.disk, Under: pl.under, Visit: func(rel string) { pl.through[rel] = mpath }}
	parent, err := walk.Resolve("", linkwalk.Parent(mpath), true)
	if errors.Is(err, linkwalk.ErrOutside) {
		return "", fmt.Errorf("%s: parent directory %w", mpath, err)
	}
	if err != nil {
		return "", fmt.Errorf("%s: %w", mpath, err)
	}
	rel := linkwalk.Join(parent, path.Base(mpath))
	if other, dup := pl.phys[rel]; dup {
		return "", fmt.Errorf("%s: same file on disk as %s", mpath, other)
	}
	pl.phys[rel] = mpath
	for d := linkwalk.Parent(rel); d != ""; d = linkwalk.Parent(d) {
		pl.dirs[d] = mpath
		pl.through[d] = mpath
	}
	return rel, nil
}

// resolveRoot returns the target directory with symlinks resolved, and its
// absolute spelling before resolution (links on disk may use either). A
// missing directory is fine: it is created after planning.
func resolveRoot(dir string) (root, alias string, err error) {
	if dir == "" {
		return "", "", fmt.Errorf("no target directory")
	}
	alias, err = filepath.Abs(dir)
	if err != nil {
		return "", "", fmt.Errorf("target directory: %w", err)
	}
	// Resolve the deepest existing ancestor and append the missing rest.
	existing, rest := alias, ""
	for {
		fi, err := os.Stat(existing)
		if err == nil {
			if !fi.IsDir() {
				return "", "", fmt.Errorf("target %s is not a directory", existing)
			}
			break
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", "", fmt.Errorf("target directory: %w", err)
		}
		parent := filepath.Dir(existing)
		if parent == existing {
			break
		}
		rest = filepath.Join(filepath.Base(existing), rest)
		existing = parent
	}
	real, err := filepath.EvalSymlinks(existing)
	if err != nil {
		return "", "", fmt.Errorf("target directory: %w", err)
	}
	return filepath.Join(real, rest), alias, nil
}

// checkRel repeats the decoder's lexical path checks, so that the planner
// is safe on its own whatever produced the manifest.
func checkRel(p string) error {
	if p == "" || strings.ContainsAny(p, "\\\x00") || path.Clean(p) != p || !filepath.IsLocal(filepath.FromSlash(p)) {
		return fmt.Errorf("path %q is not a clean relative path inside the checkpoint", p)
	}
	for _, el := range strings.Split(p, "/") {
		if el == ".." || el == "." {
			return fmt.Errorf("path %q is not a clean relative path inside the checkpoint", p)
		}
	}
	return nil
}

// checkExisting refuses to write over directories, and over regular files
// with links: those may be user data ferry does not own. An existing symlink
// where a file goes is replaced (rename does not follow it); one where a
// link goes is replaced unless it already has the right target.
func (p *plan) checkExisting() error {
	for _, f := range p.files {
		if f.absent {
			continue
		}
		fi, err := os.Lstat(f.abs)
		if err == nil && fi.IsDir() {
			return fmt.Errorf("%s: a directory is in the way", f.file.Path)
		}
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%s: %w", f.file.Path, err)
		}
	}
	for i := range p.links {
		l := &p.links[i]
		fi, err := os.Lstat(l.abs)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return fmt.Errorf("%s: %w", l.link.Path, err)
		case fi.Mode()&fs.ModeSymlink != 0:
			t, err := os.Readlink(l.abs)
			if err != nil {
				return fmt.Errorf("%s: %w", l.link.Path, err)
			}
			l.keep = t == l.link.Target
		case fi.IsDir():
			return fmt.Errorf("%s: refusing to replace a directory with a symlink", l.link.Path)
		default:
			return fmt.Errorf("%s: refusing to replace a regular file with a symlink (remove it to restore the link)", l.link.Path)
		}
	}
	return nil
}

// checkLinkTargets resolves every manifest link as the disk will be once the
// restore is done: manifest files, links and directories first, the existing
// disk for everything else. A link is accepted only if it cannot lead
// outside the target directory, whichever links it goes through.
func (p *plan) checkLinkTargets(files map[string]bool, links map[string]string, dirs map[string]string, under func(string) (string, bool)) error {
	after := func(rel string) (linkwalk.Kind, string, error) {
		if t, ok := links[rel]; ok {
			return linkwalk.Link, t, nil
		}
		if files[rel] {
			return linkwalk.File, "", nil
		}
		if _, ok := dirs[rel]; ok {
			return linkwalk.Dir, "", nil
		}
		return diskLookup(p.root, rel)
	}
	for _, l := range p.links {
		if path.IsAbs(l.link.Target) || strings.ContainsAny(l.link.Target, "\\\x00") {
			return fmt.Errorf("%s: link target %q is not a relative path", l.link.Path, l.link.Target)
		}
		got, err := linkwalk.Walk{Lookup: after, Under: under}.Resolve(linkwalk.Parent(filepath.ToSlash(l.rel)), l.link.Target, false)
		if err != nil && !errors.Is(err, linkwalk.ErrNotDir) {
			return fmt.Errorf("%s: link target %q %w", l.link.Path, l.link.Target, err)
		}
		if err == nil {
			if k, _, lerr := after(got); lerr == nil && k == linkwalk.Missing {
				p.dangling = append(p.dangling, l.link.Path+" -> "+l.link.Target)
			}
		}
	}
	return nil
}

// diskLookup reports what the disk holds at a root-relative path now.
func diskLookup(root, rel string) (linkwalk.Kind, string, error) {
	absent := false
	lstat := func(name string) (fs.FileInfo, error) {
		fi, err := os.Lstat(name)
		absent = errors.Is(err, fs.ErrNotExist)
		return fi, err
	}
	k, target, err := linkwalk.Look(filepath.Join(root, filepath.FromSlash(rel)), lstat, os.Readlink)
	if absent {
		return linkwalk.Missing, "", nil // nothing there (a link that vanished before its readlink is an error)
	}
	return k, target, err
}

// missingDirs lists the directories the restore must create, relative to
// the root, parents first.
func missingDirs(root string, dirs map[string]string) []string {
	var out []string
	for rel := range dirs {
		rel = filepath.FromSlash(rel)
		if _, err := os.Lstat(filepath.Join(root, rel)); errors.Is(err, fs.ErrNotExist) {
			out = append(out, rel)
		}
	}
	sort.Strings(out) // a parent is a prefix of its children, so sorts first
	return out
}
