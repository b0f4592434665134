package detect

import (
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
)

// The tree's listings, lstats and readlinks resolve beneath the root as an
// os.Root, never by absolute path: a folder swapped for a link to another
// folder between its lstat and its listing would otherwise have the agent,
// often root, list and stat a folder outside the watched directory
// (os.Root follows only links that stay inside it). A listing opens with
// O_DIRECTORY where there is one: a FIFO swapped in fails at once.

// openRoot returns the root open, t.r when a caller up the stack holds it
// (within), else opened for this one call; done closes what it opened.
func (t *Tree) openRoot() (r *os.Root, done func(), err error) {
	if t.r != nil {
		return t.r, func() {}, nil
	}
	if r, err = os.OpenRoot(t.root); err != nil {
		return nil, nil, err
	}
	return r, func() { r.Close() }, nil
}

// within runs fn with the root held open for every look fn takes (one
// open for a whole scan instead of one per entry); if the root cannot be
// opened, each look fails with that error.
func (t *Tree) within(fn func()) {
	if t.r == nil {
		if r, err := os.OpenRoot(t.root); err == nil {
			t.r = r
			defer func() { t.r = nil; r.Close() }()
		}
	}
	fn()
}

// rootName is p as os.Root names it.
func rootName(p string) string {
	if p == "" {
		return "."
	}
	return p
}

// readDir lists the folder p beneath the root, sorted by name.
func (t *Tree) readDir(p string) ([]fs.DirEntry, error) {
	f, err := t.openDir(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	des, err := f.ReadDir(-1)
	slices.SortFunc(des, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return des, err
}

// lstat describes p beneath the root without following it.
func (t *Tree) lstat(p string) (fs.FileInfo, error) {
	r, done, err := t.openRoot()
	if err != nil {
		return nil, err
	}
	defer done()
	return r.Lstat(rootName(p))
}

// readlink reads the link p beneath the root.
func (t *Tree) readlink(p string) (string, error) {
	r, done, err := t.openRoot()
	if err != nil {
		return "", err
	}
	defer done()
	return r.Readlink(rootName(p))
}

// openDir opens the folder p beneath the root, to list or watch it:
// anything that is not a folder fails, and a link is followed only inside
// the root.
func (t *Tree) openDir(p string) (*os.File, error) {
	r, done, err := t.openRoot()
	if err != nil {
		return nil, err
	}
	defer done()
	f, err := r.OpenFile(rootName(p), os.O_RDONLY|openDirFlag, 0)
	if err != nil {
		return nil, err
	}
	if fi, err := f.Stat(); err != nil || !fi.IsDir() {
		f.Close()
		return nil, fmt.Errorf("%s: not a folder", p)
	}
	return f, nil
}

// sameDir reports whether the folder p beneath the root is still the one
// open as f.
func (t *Tree) sameDir(p string, f *os.File) bool {
	now, err := t.lstat(p)
	if err != nil || !now.IsDir() {
		return false
	}
	was, err := f.Stat()
	return err == nil && os.SameFile(was, now)
}
