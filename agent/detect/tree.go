package detect

import (
	"errors"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"time"

	"github.com/ferrylabs/ferry/internal/confine"
)

// Entry is one path of the watched tree as last observed.
type Entry struct {
	// Path is slash-separated and relative to the root; "" is the root.
	Path string
	// Type holds the type bits of the mode: 0 for a regular file,
	// fs.ModeDir, fs.ModeSymlink, or another type (never part of a step).
	Type fs.FileMode
	// Size and ModTime are from lstat.
	Size    int64
	ModTime time.Time
	// ChangeTime is the inode's change time where the platform gives it
	// (a rename sets it: when a marker renamed into place arrived).
	ChangeTime time.Time
	// Target is a symlink's text.
	Target string
	// Err is set when the entry could not be examined (a directory that
	// cannot be listed, a link that cannot be read).
	Err error

	// id is the file's device and inode, where the platform gives them: a
	// folder removed and created again under the same name is a new
	// folder, with nothing of the old one's watches or contents.
	id fileID

	// rank caches RankOf(Path), which depends on the path alone.
	rank     *int
	rankDone bool
}

// Rank returns RankOf(e.Path), computed once per path.
func (e *Entry) Rank() *int {
	if !e.rankDone {
		e.rank, e.rankDone = RankOf(e.Path), true
	}
	return e.rank
}

// IsDir reports whether the entry is a directory (not a link to one).
func (e Entry) IsDir() bool { return e.Type == fs.ModeDir }

// IsRegular reports whether the entry is a regular file.
func (e Entry) IsRegular() bool { return e.Type == 0 }

// IsSymlink reports whether the entry is a symbolic link.
func (e Entry) IsSymlink() bool { return e.Type == fs.ModeSymlink }

// Name returns the last element of the entry's path.
func (e Entry) Name() string { return path.Base(e.Path) }

// Tree is the watcher's picture of the directory: metadata only, updated
// incrementally from fsnotify events and rescans. Layouts read it; only the
// watcher changes it. Symbolic links are entries, never descended into.
type Tree struct {
	root     string
	entries  map[string]*Entry
	children map[string]map[string]struct{}
	// sorted caches each folder's children in name order; a folder's
	// cache is dropped whenever a child is added or removed (entries are
	// updated in place, so the cached pointers stay current).
	sorted map[string][]*Entry
	// r is the root, open while a scan or refresh runs (within).
	r *os.Root
}

func newTree(root string) *Tree {
	return &Tree{
		root:     root,
		entries:  map[string]*Entry{},
		children: map[string]map[string]struct{}{},
		sorted:   map[string][]*Entry{},
	}
}

// Root returns the absolute directory the tree describes.
func (t *Tree) Root() string { return t.root }

// Get returns the entry at p.
func (t *Tree) Get(p string) (Entry, bool) {
	e, ok := t.entries[p]
	if !ok {
		return Entry{}, false
	}
	return *e, true
}

// Children returns the entries directly inside dir, sorted by name.
func (t *Tree) Children(dir string) []Entry {
	out := make([]Entry, 0, len(t.children[dir]))
	t.eachChild(dir, func(e *Entry) {
		e.Rank() // cached on the stored entry, so the copy carries it
		out = append(out, *e)
	})
	return out
}

// eachChild calls fn for the entries directly inside dir, sorted by name,
// without copying them; fn must not change the tree.
func (t *Tree) eachChild(dir string, fn func(*Entry)) {
	ents, ok := t.sorted[dir]
	if !ok {
		for name := range t.children[dir] {
			ents = append(ents, t.entries[join(dir, name)])
		}
		sort.Slice(ents, func(i, j int) bool { return ents[i].Path < ents[j].Path })
		t.sorted[dir] = ents
	}
	for _, e := range ents {
		fn(e)
	}
}

// Walk calls fn for every entry below dir (not dir itself), parents before
// children, siblings sorted by name.
func (t *Tree) Walk(dir string, fn func(Entry)) {
	for _, e := range t.Children(dir) {
		fn(e)
		if e.IsDir() {
			t.Walk(e.Path, fn)
		}
	}
}

// maxSmallFile bounds ReadSmall: pointer files hold a tag or a number.
const maxSmallFile = 4096

// ReadSmall reads the first 4 KiB of the regular file at p: enough for the
// pointer files layouts consult (DeepSpeed's latest, Megatron's tracker).
// It reads beneath the root and follows no link (a folder swapped for
// one since the scan is refused), never blocks on a FIFO swapped in, and
// refuses a hard-linked file, whose content a generated pointer file
// would carry to the bucket.
func (t *Tree) ReadSmall(p string) ([]byte, error) {
	e, ok := t.entries[p]
	if !ok || !e.IsRegular() {
		return nil, fs.ErrNotExist
	}
	data, _, err := readSmallAt(t, p)
	return data, err
}

// openRegular opens the regular file at p (relative to the root) for
// reading as the uploader does: beneath the root, following no link on the
// way, without blocking on a FIFO, refusing a hard-linked file; the stat
// is fstat's. Every read of a file's content by the detector goes through
// it.
func (t *Tree) openRegular(p string) (*os.File, confine.Stat, error) {
	root, err := confine.Open(t.root)
	if err != nil {
		return nil, confine.Stat{}, err
	}
	defer root.Close()
	return root.OpenRegular(p)
}

// openForWriting asks the kernel whether any process holds the file at p
// (relative to the root) open for writing, opening it beneath the root
// without following a link (see the function of that name).
func (t *Tree) openForWriting(p string) (bool, error) {
	root, err := confine.Open(t.root)
	if err != nil {
		return true, err
	}
	defer root.Close()
	return openForWriting(root, p)
}

// located returns a copy of files with each one's LocalPath set, and its
// device and inode as scanned: the uploader reads that file and no other.
func (t *Tree) located(files []File) []File {
	out := append([]File(nil), files...)
	for i := range out {
		out[i].LocalPath = t.abs(out[i].RelPath)
		if e, ok := t.entries[out[i].RelPath]; ok {
			out[i].Dev, out[i].Ino = e.id.dev, e.id.ino
		}
	}
	return out
}

func (t *Tree) abs(p string) string {
	if p == "" {
		return t.root
	}
	return filepath.Join(t.root, filepath.FromSlash(p))
}

func join(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

func parent(p string) string {
	d := path.Dir(p)
	if d == "." {
		return ""
	}
	return d
}

// set records e, replacing whatever was at its path; a directory replaced by
// something else loses its subtree.
func (t *Tree) set(e Entry) {
	old, ok := t.entries[e.Path]
	if ok && old.IsDir() && !e.IsDir() {
		t.remove(e.Path)
		ok = false
	}
	if ok {
		e.rank, e.rankDone = old.rank, old.rankDone
		*old = e
		return
	}
	t.entries[e.Path] = &e
	if e.Path != "" {
		dir := parent(e.Path)
		kids := t.children[dir]
		if kids == nil {
			kids = map[string]struct{}{}
			t.children[dir] = kids
		}
		kids[path.Base(e.Path)] = struct{}{}
		delete(t.sorted, dir)
	}
}

// remove forgets p and everything below it.
func (t *Tree) remove(p string) {
	for name := range t.children[p] {
		t.remove(join(p, name))
	}
	delete(t.children, p)
	delete(t.sorted, p)
	delete(t.entries, p)
	if p != "" {
		if kids := t.children[parent(p)]; kids != nil {
			delete(kids, path.Base(p))
		}
		delete(t.sorted, parent(p))
	}
}

func entryFromInfo(p string, fi fs.FileInfo) Entry {
	id, _ := idOf(fi)
	return Entry{Path: p, Type: fi.Mode().Type(), Size: fi.Size(), ModTime: fi.ModTime(), ChangeTime: changeTime(fi), id: id}
}

// sameDir reports whether a directory entry and the one before it at the
// same path are the same folder (not one removed and created again).
func sameDir(old *Entry, known bool, now *Entry) bool {
	return known && old.IsDir() && now.IsDir() && old.id == now.id
}

// watchFunc is called for every directory before it is listed, so that
// an fsnotify watch covers whatever appears after the listing. A nil
// watchFunc watches nothing (poll mode, one-shot scans).
type watchFunc func(rel string)

// scanDir lists dir (already known to be a directory) and brings its
// children up to date: new ones added, vanished ones removed with their
// subtrees, all re-examined. New subdirectories are always scanned; known
// ones only when recursive.
func (t *Tree) scanDir(dir string, recursive bool, watch watchFunc) error {
	if watch != nil {
		watch(dir)
	}
	des, err := t.readDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			t.remove(dir)
			return nil
		}
		if e, ok := t.entries[dir]; ok {
			e.Err = err
		}
		return err
	}
	if e, ok := t.entries[dir]; ok {
		e.Err = nil
	}
	present := make(map[string]struct{}, len(des))
	for _, de := range des {
		present[de.Name()] = struct{}{}
	}
	for name := range t.children[dir] {
		if _, ok := present[name]; !ok {
			t.remove(join(dir, name))
		}
	}
	for _, de := range des {
		p := join(dir, de.Name())
		var before Entry
		old, known := t.entries[p]
		if known {
			before = *old
		}
		if !t.refreshEntry(p) {
			continue
		}
		if e := t.entries[p]; e.IsDir() && (recursive || !sameDir(&before, known, e)) {
			// A listing error lands in the directory's Err.
			_ = t.scanDir(p, true, watch)
		}
	}
	return nil
}

// refreshEntry lstats p and records what it finds; it reports whether p
// still exists. Directories are not listed.
func (t *Tree) refreshEntry(p string) bool {
	fi, err := t.lstat(p)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			t.remove(p)
			return false
		}
		// Kept as an entry so that the step holding it reports the error
		// instead of looking complete without it.
		t.set(Entry{Path: p, Err: err, Type: fs.ModeIrregular})
		return true
	}
	e := entryFromInfo(p, fi)
	if e.IsSymlink() {
		e.Target, e.Err = t.readlink(p)
	}
	if old, ok := t.entries[p]; ok && old.IsDir() && e.IsDir() {
		e.Err = old.Err // keep a listing error until the next listing
	}
	t.set(e)
	return true
}

// refresh brings the tree up to date for one path named by an event: it
// re-examines p, lists p if it became a directory or is a new one (created
// says an event reported it created: a folder removed and created again
// within one debounce window, whose inode may even be the old one's), and
// drops p's subtree if p vanished. Events about paths whose parent is
// unknown (already removed, or below a link) are ignored: the parent's own
// event or a rescan covers them.
func (t *Tree) refresh(p string, watch watchFunc, created bool) {
	t.within(func() { t.refreshWithin(p, watch, created) })
}

func (t *Tree) refreshWithin(p string, watch watchFunc, created bool) {
	if p != "" {
		if pe, ok := t.entries[parent(p)]; !ok || !pe.IsDir() {
			return
		}
	}
	var before Entry
	old, known := t.entries[p]
	if known {
		before = *old
	}
	if !t.refreshEntry(p) {
		return
	}
	if e := t.entries[p]; e.IsDir() && (created || !sameDir(&before, known, e)) {
		// New, or removed and created again: watch and list it now, not
		// at the next rescan.
		_ = t.scanDir(p, true, watch)
	}
}

// scanAll rescans the whole tree; it fails only if the root cannot be
// listed.
func (t *Tree) scanAll(watch watchFunc) error {
	fi, err := os.Stat(t.root)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return &fs.PathError{Op: "watch", Path: t.root, Err: errors.New("not a directory")}
	}
	t.set(Entry{Path: "", Type: fs.ModeDir, ModTime: fi.ModTime()})
	t.within(func() { err = t.scanDir("", true, watch) })
	return err
}
