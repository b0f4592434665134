package detect

import (
	"path"
	"path/filepath"
	"strings"

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
// target does not exist or resolves outside the root. The check resolves
// every link on the way (filepath.EvalSymlinks), so a chain that leaves the
// root and comes back is judged by where it ends. The stored text is kept
// when it is relative and lexically inside the root; otherwise it is
// rewritten to the relative path of the resolved file.
func (e *engine) checkLink(l Symlink) (Symlink, bool) {
	var abs string
	if filepath.IsAbs(l.Target) {
		abs = l.Target
	} else {
		abs = filepath.Join(e.tree.root, filepath.FromSlash(parent(l.RelPath)), filepath.FromSlash(l.Target))
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		e.warnLink(l, "target does not exist or cannot be resolved")
		return l, false
	}
	rel, err := filepath.Rel(e.rootReal, real)
	if err != nil || !insideRel(filepath.ToSlash(rel)) {
		e.warnLink(l, "target is outside the watched directory")
		return l, false
	}
	if lex, ok := lexicalTarget(e.tree.root, l); ok && !filepath.IsAbs(l.Target) && insideRel(lex) {
		return l, true
	}
	target, err := filepath.Rel(filepath.FromSlash(parent(l.RelPath)), rel)
	if err != nil {
		e.warnLink(l, "target cannot be expressed relative to the link")
		return l, false
	}
	return Symlink{RelPath: l.RelPath, Target: filepath.ToSlash(target)}, true
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
