// Package linkwalk resolves a path beneath a root directory the way the
// kernel would, one component at a time, following every symlink met on
// the way, and refuses any resolution that would leave the root: a ".."
// above it, or an absolute link target not spelled under it. What each
// path holds comes from a Lookup the caller supplies, so the same walk
// serves the agent (the watch dir, read through an os.Root) and restore
// (the target directory as the manifest will leave it).
package linkwalk

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"path/filepath"
	"strings"
)

// MaxHops bounds how many symlinks one resolution follows, as the kernel's
// ELOOP limit does (40 on Linux), so no chain can make a walk loop.
const MaxHops = 40

// Kind is what a Lookup found at a path.
type Kind int

const (
	// Missing: nothing is there (restore creates it as a directory).
	Missing Kind = iota
	// Dir is a directory.
	Dir
	// File is a regular file or anything else that is not a directory.
	File
	// Link is a symlink; the Lookup returns its target text.
	Link
)

var (
	// ErrOutside is why a resolution is refused when it would leave the
	// root (or follow more than MaxHops links).
	ErrOutside = errors.New("resolves outside the target directory")
	// ErrNotDir means a non-directory sits in the middle of a path: such a
	// path does not resolve at all, which for a link is harmless (dangling).
	ErrNotDir = errors.New("not a directory")
)

// Lookup reports what is at a root-relative, slash-separated path; for a
// Link, target is the link's text.
type Lookup func(rel string) (k Kind, target string, err error)

// Look says what lstat finds at name, reading a link's target with
// readlink: the one way the agent (through an os.Root) and restore (on the
// disk) build their Lookup. lstat's error is returned as it is.
func Look(name string, lstat func(string) (fs.FileInfo, error), readlink func(string) (string, error)) (Kind, string, error) {
	fi, err := lstat(name)
	switch {
	case err != nil:
		return 0, "", err
	case fi.Mode()&fs.ModeSymlink != 0:
		t, err := readlink(name)
		if err != nil {
			return 0, "", err
		}
		return Link, t, nil
	case fi.IsDir():
		return Dir, "", nil
	}
	return File, "", nil
}

// Walk is how a resolution sees the root.
type Walk struct {
	// Lookup says what each path holds.
	Lookup Lookup
	// Under returns what follows the root in an absolute link target, or
	// false when the target is not spelled under the root (UnderRoot is
	// the usual one).
	Under func(abs string) (rest string, ok bool)
	// Visit, if set, sees every path looked up.
	Visit func(rel string)
}

// Resolve walks the slash-separated path rest from the root-relative
// folder start and returns the root-relative physical path it reaches, ""
// for the root itself. It fails with ErrOutside when ".." or a link leaves
// the root, with ErrNotDir when a non-directory is in the middle of the
// path (or at its end, with wantDir), and with the Lookup's own error. rest
// may be a link's absolute target: it is then resolved from the root if
// Under finds it spelled under the root, and refused otherwise.
func (w Walk) Resolve(start, rest string, wantDir bool) (string, error) {
	queue, abs, err := w.targetParts(start, rest)
	if err != nil {
		return "", err
	}
	cur := Split(start)
	if abs {
		cur = nil
	}
	hops := 0
	for len(queue) > 0 {
		c := queue[0]
		queue = queue[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if len(cur) == 0 {
				return "", ErrOutside
			}
			cur = cur[:len(cur)-1]
			continue
		}
		next := Join(strings.Join(cur, "/"), c)
		if w.Visit != nil {
			w.Visit(next)
		}
		k, target, err := w.Lookup(next)
		if err != nil {
			return "", err
		}
		switch k {
		case Link:
			if hops++; hops > MaxHops {
				return "", fmt.Errorf("%w: too many levels of symlinks", ErrOutside)
			}
			more, abs, err := w.targetParts(next, target)
			if err != nil {
				return "", err
			}
			if abs {
				cur = nil
			}
			queue = append(more, queue...)
		case File:
			if len(queue) > 0 || wantDir {
				return "", fmt.Errorf("%s is %w", next, ErrNotDir)
			}
			cur = append(cur, c)
		default:
			cur = append(cur, c)
		}
	}
	return strings.Join(cur, "/"), nil
}

// targetParts splits the target of the link at rel (or a path to resolve
// from rel) into the components to resolve next: from the link's folder,
// or from the root (abs) for an absolute target spelled under the root
// (Under).
func (w Walk) targetParts(rel, target string) (parts []string, abs bool, err error) {
	if !filepath.IsAbs(target) {
		return Split(filepath.ToSlash(target)), false, nil
	}
	rest, ok := w.Under(target)
	if !ok {
		return nil, false, fmt.Errorf("%w: %s is a symlink to %s", ErrOutside, rel, target)
	}
	return Split(rest), true, nil
}

// UnderRoot returns what follows the root in an absolute link target
// spelled under any of roots (the root as given and with its links
// resolved, since links on disk may use either), as a slash path left for
// the walk to resolve: nothing in it is cleaned away, since "x/.." on disk
// is not always where "x/.." reads (x may be a link), and a ".." that
// climbs above the root is refused by the walk. ok is false for a target
// spelled under none of them.
func UnderRoot(target string, roots ...string) (rest string, ok bool) {
	target = filepath.ToSlash(target)
	for _, r := range roots {
		r = strings.TrimSuffix(filepath.ToSlash(filepath.Clean(r)), "/")
		if r == "" || r == "." {
			continue
		}
		if target == r {
			return "", true
		}
		if rest, ok := strings.CutPrefix(target, r+"/"); ok {
			return rest, true
		}
	}
	return "", false
}

// Split splits a root-relative slash path into its components; "" and "."
// (the root) have none.
func Split(p string) []string {
	if p == "" || p == "." {
		return nil
	}
	return strings.Split(p, "/")
}

// Join joins a root-relative folder ("" for the root) and a name.
func Join(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// Parent is path.Dir with "" for the root.
func Parent(p string) string {
	d := path.Dir(p)
	if d == "." || d == "/" {
		return ""
	}
	return d
}
