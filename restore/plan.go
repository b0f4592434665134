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

	"github.com/ferrylabs/ferry/manifest"
)

// maxLinkHops bounds how many symlinks one path resolution follows, like the
// kernel's ELOOP limit, so a manifest cannot make planning loop.
const maxLinkHops = 40

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
}

// entry kinds seen while resolving a path.
type kind int

const (
	kindNone kind = iota // absent: will be created as a directory if needed
	kindDir
	kindFile // a regular file or anything else that is not a directory
	kindLink
)

var (
	errOutside = errors.New("resolves outside the target directory")
	// errNotDir means a non-directory sits in the middle of a path: such a
	// path does not resolve at all, which for a link is harmless (dangling).
	errNotDir = errors.New("not a directory")
)

// lookupFunc reports what is at a root-relative, slash-separated path.
type lookupFunc func(rel string) (k kind, target string, err error)

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
		absent := rootMissing || (dirOf(rel) != "" && pl.missing(dirOf(rel)))
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
	if err := p.checkLinkTargets(fileRel, linkRel, pl.dirs, pl.inside); err != nil {
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
	k      kind
	target string
	err    error
}

func newPlanner(root, alias string, entries int) *planner {
	return &planner{root: root, alias: alias, lookups: map[string]lookup{}, phys: make(map[string]string, entries),
		dirs: map[string]string{}, through: map[string]string{}}
}

// disk is diskLookup, once per path.
func (pl *planner) disk(rel string) (kind, string, error) {
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
	return ok && s.err == nil && s.k == kindNone
}

func (pl *planner) inside(target string) (string, bool) { return insideRoot(target, pl.root, pl.alias) }

// claim resolves a manifest path's parent on disk and records the physical
// path the entry will take, refusing one that leaves the root or that
// another entry already takes.
func (pl *planner) claim(mpath string) (string, error) {
	if err := checkRel(mpath); err != nil {
		return "", err
	}
	parent, err := resolve("", dirOf(mpath), true, pl.disk, pl.inside, func(rel string) { pl.through[rel] = mpath })
	if errors.Is(err, errOutside) {
		return "", fmt.Errorf("%s: parent directory %w", mpath, err)
	}
	if err != nil {
		return "", fmt.Errorf("%s: %w", mpath, err)
	}
	rel := joinRel(parent, path.Base(mpath))
	if other, dup := pl.phys[rel]; dup {
		return "", fmt.Errorf("%s: same file on disk as %s", mpath, other)
	}
	pl.phys[rel] = mpath
	for d := dirOf(rel); d != ""; d = dirOf(d) {
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
func (p *plan) checkLinkTargets(files map[string]bool, links map[string]string, dirs map[string]string, inside func(string) (string, bool)) error {
	after := func(rel string) (kind, string, error) {
		if t, ok := links[rel]; ok {
			return kindLink, t, nil
		}
		if files[rel] {
			return kindFile, "", nil
		}
		if _, ok := dirs[rel]; ok {
			return kindDir, "", nil
		}
		return diskLookup(p.root, rel)
	}
	for _, l := range p.links {
		if path.IsAbs(l.link.Target) || strings.ContainsAny(l.link.Target, "\\\x00") {
			return fmt.Errorf("%s: link target %q is not a relative path", l.link.Path, l.link.Target)
		}
		_, err := resolve(dirOf(filepath.ToSlash(l.rel)), l.link.Target, false, after, inside, nil)
		if err != nil && !errors.Is(err, errNotDir) {
			return fmt.Errorf("%s: link target %q %w", l.link.Path, l.link.Target, err)
		}
	}
	return nil
}

// resolve walks the slash-separated path rest from the root-relative
// directory start, following links as lookup reports them, and returns the
// root-relative physical path it reaches. It fails with errOutside when ".."
// or a link leaves the root, and errNotDir when a non-directory is in the
// middle of the path (or at its end, with wantDir). visit, if set, sees
// every path looked up.
func resolve(start, rest string, wantDir bool, lookup lookupFunc, inside func(string) (string, bool), visit func(string)) (string, error) {
	cur := splitRel(start)
	queue := splitRel(rest)
	hops := 0
	for len(queue) > 0 {
		c := queue[0]
		queue = queue[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if len(cur) == 0 {
				return "", errOutside
			}
			cur = cur[:len(cur)-1]
			continue
		}
		next := joinRel(strings.Join(cur, "/"), c)
		if visit != nil {
			visit(next)
		}
		k, target, err := lookup(next)
		if err != nil {
			return "", err
		}
		switch k {
		case kindLink:
			if hops++; hops > maxLinkHops {
				return "", fmt.Errorf("%w: too many levels of symlinks", errOutside)
			}
			if filepath.IsAbs(target) {
				rel, ok := inside(target)
				if !ok {
					return "", fmt.Errorf("%w: %s is a symlink to %s", errOutside, next, target)
				}
				cur = nil
				queue = append(splitRel(rel), queue...)
			} else {
				queue = append(splitRel(target), queue...)
			}
		case kindFile:
			if len(queue) > 0 || wantDir {
				return "", fmt.Errorf("%s is %w", next, errNotDir)
			}
			cur = append(cur, c)
		default:
			cur = append(cur, c)
		}
	}
	return strings.Join(cur, "/"), nil
}

// diskLookup reports what the disk holds at a root-relative path now.
func diskLookup(root, rel string) (kind, string, error) {
	abs := filepath.Join(root, filepath.FromSlash(rel))
	fi, err := os.Lstat(abs)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return kindNone, "", nil
	case err != nil:
		return 0, "", err
	case fi.Mode()&fs.ModeSymlink != 0:
		t, err := os.Readlink(abs)
		if err != nil {
			return 0, "", err
		}
		return kindLink, t, nil
	case fi.IsDir():
		return kindDir, "", nil
	}
	return kindFile, "", nil
}

// insideRoot converts an absolute link target to a root-relative path if it
// names something inside the root (spelled either resolved or as given).
func insideRoot(target, root, alias string) (string, bool) {
	t := filepath.Clean(target)
	for _, r := range []string{root, alias} {
		rel, err := filepath.Rel(r, t)
		if err == nil && (rel == "." || filepath.IsLocal(rel)) {
			if rel == "." {
				rel = ""
			}
			return filepath.ToSlash(rel), true
		}
	}
	return "", false
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

func splitRel(p string) []string {
	if p == "" || p == "." {
		return nil
	}
	return strings.Split(p, "/")
}

func joinRel(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// dirOf is path.Dir with "" for the root.
func dirOf(p string) string {
	d := path.Dir(p)
	if d == "." {
		return ""
	}
	return d
}
