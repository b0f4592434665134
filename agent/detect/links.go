package detect

import (
	"errors"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/ferrylabs/ferry/internal/linkwalk"
	"go.uber.org/zap"
)

// insideRel reports whether a slash path relative to the root stays inside
// it without being the root itself.
func insideRel(p string) bool {
	return p != "." && p != "" && p != ".." && !strings.HasPrefix(p, "../")
}

// lexicalTarget resolves a link's text against the link's folder without
// touching the disk, giving a slash path relative to the root. Absolute
// targets are made relative to the root; ok is false when that fails.
func lexicalTarget(root string, l Symlink) (string, bool) {
	if filepath.IsAbs(l.Target) {
		rel, err := filepath.Rel(root, l.Target)
		if err != nil {
			return "", false
		}
		return filepath.ToSlash(rel), true
	}
	return path.Join(parent(l.RelPath), filepath.ToSlash(l.Target)), true
}

// checkLink returns the link as it should be recorded, or false when its
// target does not exist or does not resolve inside the root. The check
// resolves every link on the way, beneath the root only (resolveInside):
// a chain that passes outside is refused even if it would come back, since
// looking outside with the agent's rights (often root's) would tell the
// trainer, through the manifest, what exists where it cannot look. The
// stored text is kept when it is relative and lexically inside the root;
// otherwise it is rewritten to the relative path of the resolved file.
func (e *engine) checkLink(l Symlink) (Symlink, bool) {
	rel, err := e.resolveInside(l)
	if err != nil && !errors.Is(err, linkwalk.ErrOutside) {
		e.warnLink(l, "target does not exist or cannot be resolved")
		return l, false
	}
	if err != nil || !insideRel(rel) {
		e.warnLink(l, "target is outside the watched directory")
		return l, false
	}
	if lex, ok := lexicalTarget(e.tree.root, l); ok && !filepath.IsAbs(l.Target) && insideRel(lex) {
		return l, true
	}
	target, err := filepath.Rel(filepath.FromSlash(parent(l.RelPath)), filepath.FromSlash(rel))
	if err != nil {
		e.warnLink(l, "target cannot be expressed relative to the link")
		return l, false
	}
	return Symlink{RelPath: l.RelPath, Target: filepath.ToSlash(target)}, true
}

// resolveInside returns where l leads, as a slash path relative to the
// root, resolving each component beneath the root (os.Root) and every
// link met on the way (linkwalk, as restore resolves), and touching
// nothing outside: a ".." above the root, or an absolute target not
// spelled under the root's path (as given or resolved), is
// linkwalk.ErrOutside; a missing component is fs.ErrNotExist.
func (e *engine) resolveInside(l Symlink) (string, error) {
	r, err := os.OpenRoot(e.tree.root)
	if err != nil {
		return "", err
	}
	defer r.Close()
	lookup := func(rel string) (linkwalk.Kind, string, error) { return linkwalk.Look(rel, r.Lstat, r.Readlink) }
	under := func(abs string) (string, bool) { return linkwalk.UnderRoot(abs, e.tree.root, e.rootReal) }
	return linkwalk.Walk{Lookup: lookup, Under: under}.Resolve(parent(l.RelPath), filepath.ToSlash(l.Target), false)
}

func (e *engine) warnLink(l Symlink, why string) {
	key := l.RelPath + "\x00" + l.Target
	if e.warned[key] {
		return
	}
	e.warned[key] = true
	e.log.Warn("symbolic link skipped: "+why, zap.String("link", l.RelPath), zap.String("target", l.Target))
}

// rootLinks returns the links lying directly in the root whose target,
// read lexically, is one of the step's files or lies in its folder:
// Composer's latest-rank links to a sharded folder, a user's "best" link.
func rootLinks(t *Tree, s *Step) []Symlink {
	var files map[string]bool
	var out []Symlink
	for _, e := range t.Children("") {
		if !e.IsSymlink() || e.Err != nil {
			continue
		}
		l := Symlink{RelPath: e.Path, Target: e.Target}
		target, ok := lexicalTarget(t.root, l)
		if !ok || !insideRel(target) {
			continue
		}
		if s.Root != "" && (target == s.Root || strings.HasPrefix(target, s.Root+"/")) {
			out = append(out, l)
			continue
		}
		if files == nil {
			files = make(map[string]bool, len(s.Files))
			for _, f := range s.Files {
				files[f.RelPath] = true
			}
		}
		if files[target] {
			out = append(out, l)
		}
	}
	return out
}
