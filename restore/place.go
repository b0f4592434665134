package restore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"unicode/utf8"

	"golang.org/x/sync/errgroup"
)

// Temp names are ".<name>.ferry-<16 hex>.tmp" beside the final path, so the
// rename stays within one directory (atomic) and a later restore can
// recognise and remove what an interrupted one left behind.
const (
	tempMarker = ".ferry-"
	tempSuffix = ".tmp"
	randLen    = 16
	maxNameLen = 255 // NAME_MAX on Linux and macOS
	// nameRoom is the longest base a temp name can hold.
	nameRoom = maxNameLen - 1 - len(tempMarker) - randLen - len(tempSuffix)
)

// tempName returns a temp name for base, shortening base when the result
// would exceed the file system's name limit.
func tempName(base string) string {
	for len(base) > nameRoom {
		_, size := utf8.DecodeLastRuneInString(base)
		base = base[:len(base)-size]
	}
	return fmt.Sprintf(".%s%s%016x%s", base, tempMarker, rand.Uint64(), tempSuffix)
}

// tempOf returns the name a temp file of ours was made for (possibly
// shortened), or "" if name is not one of our temp names.
func tempOf(name string) string {
	rest, ok := strings.CutPrefix(name, ".")
	if !ok {
		return ""
	}
	rest, ok = strings.CutSuffix(rest, tempSuffix)
	if !ok {
		return ""
	}
	i := len(rest) - randLen - len(tempMarker)
	if i < 1 || rest[i:i+len(tempMarker)] != tempMarker {
		return ""
	}
	for _, c := range rest[i+len(tempMarker):] {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return ""
		}
	}
	return rest[:i]
}

// createTemp creates a new, empty temp file beside the root-relative path
// rel and returns it with its root-relative name.
func (r *restorer) createTemp(rel string) (*os.File, string, error) {
	dir, err := r.dirRoot(filepath.Dir(rel))
	if err != nil {
		return nil, "", err
	}
	for range 10 {
		name := tempName(filepath.Base(rel))
		tmp := filepath.Join(filepath.Dir(rel), name)
		f, err := dir.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return nil, "", err
		}
		return f, tmp, nil
	}
	return nil, "", fmt.Errorf("create temp file in %s: too many name collisions", filepath.Dir(rel))
}

// stage checks a verified temp file's size, closes it and renames it to
// its staged name (stagedName), where it waits for commit to put it at its
// final path once every file of the step is verified; with Options.Fsync
// it fsyncs the file first, and its directory is fsynced later, once per
// directory.
func (r *restorer) stage(f *os.File, tmp string, job *fileJob) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if fi.Size() != job.file.Size {
		return fmt.Errorf("size mismatch: got %d bytes, manifest says %d", fi.Size(), job.file.Size)
	}
	if r.opts.Fsync {
		if err := f.Sync(); err != nil {
			return fmt.Errorf("fsync %s: %w", tmp, err)
		}
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", tmp, err)
	}
	dir, err := r.dirRoot(filepath.Dir(job.rel))
	if err != nil {
		return err
	}
	staged := stagedName(job)
	if err := dir.Rename(filepath.Base(tmp), staged); err != nil {
		return err
	}
	r.addStaged(job, filepath.Join(filepath.Dir(job.rel), staged))
	return nil
}

// dirRoot returns the root-relative folder dir as an os.Root of its own,
// opened once per restore. It stays confined like the target's root: it
// was opened through it, and a symlink swapped in for the folder later
// does not move it.
func (r *restorer) dirRoot(dir string) (*os.Root, error) {
	if dir == "." || dir == "" {
		return r.root, nil
	}
	if d, ok := r.dirRoots.Load(dir); ok {
		return d.(*os.Root), nil
	}
	d, err := r.root.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	if prev, loaded := r.dirRoots.LoadOrStore(dir, d); loaded {
		d.Close() // another file of the folder opened it first
		return prev.(*os.Root), nil
	}
	return d, nil
}

// addSyncDir notes a root-relative directory whose entries changed.
func (r *restorer) addSyncDir(rel string) {
	r.mu.Lock()
	r.syncDirs[rel] = true
	r.mu.Unlock()
}

// openRoot creates the target directory if needed and opens it as an
// os.Root, through which every later write goes, then creates the planned
// directories. It records what it creates, for removal after a failure.
func (r *restorer) openRoot(p *plan) error {
	var missing []string
	for d := p.root; ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); err == nil || filepath.Dir(d) == d {
			break
		}
		missing = append(missing, d)
	}
	for i := len(missing) - 1; i >= 0; i-- {
		d := missing[i]
		if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("create target directory: %w", err)
		}
		r.madeOutside = append(r.madeOutside, d)
		r.syncOutside = append(r.syncOutside, filepath.Dir(d))
	}
	root, err := os.OpenRoot(p.root)
	if err != nil {
		return fmt.Errorf("open target directory: %w", err)
	}
	r.root = root
	for _, d := range p.mkdir {
		err := root.Mkdir(d, 0o755)
		if errors.Is(err, fs.ErrExist) {
			if fi, serr := root.Lstat(d); serr == nil && fi.IsDir() {
				continue
			}
		}
		if err != nil {
			return fmt.Errorf("create directory: %w", err)
		}
		r.madeInside = append(r.madeInside, d)
		r.addSyncDir(filepath.Dir(d))
	}
	return nil
}

// removeMadeDirs removes the directories a failed restore created,
// children first, if nothing else was put in them.
func (r *restorer) removeMadeDirs() {
	for i := len(r.madeInside) - 1; i >= 0 && r.root != nil; i-- {
		r.root.Remove(r.madeInside[i]) // fails, as it should, when not empty
	}
	for i := len(r.madeOutside) - 1; i >= 0; i-- {
		os.Remove(r.madeOutside[i])
	}
}

// removeStale removes temp files an interrupted restore left beside the
// planned paths. Only names of our temp pattern made for a planned entry
// of that directory are touched; a staged copy of a planned file (its
// name carries the file's hash) is kept for keep to check and use.
func (r *restorer) removeStale(p *plan) error {
	byDir := map[string]map[string]bool{}
	add := func(rel string) {
		dir := filepath.Dir(rel)
		if byDir[dir] == nil {
			byDir[dir] = map[string]bool{}
		}
		byDir[dir][filepath.Base(rel)] = true
	}
	staged := map[string]*fileJob{} // staged name -> its file
	for i := range p.files {
		f := &p.files[i]
		add(f.rel)
		staged[filepath.Join(filepath.Dir(f.rel), stagedName(f))] = f
	}
	for _, l := range p.links {
		add(l.rel)
	}
	for dir, names := range byDir {
		ents, err := r.readDir(dir)
		if err != nil {
			return fmt.Errorf("list %s: %w", filepath.Join(p.root, dir), err)
		}
		for _, e := range ents {
			base := tempOf(e.Name())
			if base == "" || e.IsDir() || !madeFor(base, names) {
				continue
			}
			if job := staged[filepath.Join(dir, e.Name())]; job != nil {
				job.resume = filepath.Join(dir, e.Name()) // verified by keep
				continue
			}
			if err := r.root.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("remove stale temp file: %w", err)
			}
		}
	}
	return nil
}

func (r *restorer) readDir(rel string) ([]fs.DirEntry, error) {
	d, err := r.root.Open(rel)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return d.ReadDir(-1)
}

// madeFor reports whether a temp file's base names one of names, allowing
// for the shortening of long names.
func madeFor(base string, names map[string]bool) bool {
	if names[base] {
		return true
	}
	if len(base) <= nameRoom-utf8.UTFMax {
		return false // not shortened, and no exact match
	}
	for n := range names {
		if strings.HasPrefix(n, base) {
			return true
		}
	}
	return false
}

// syncAllDirs fsyncs every directory that gained or changed an entry, once
// each, so that the renames survive a crash. Batching per directory keeps
// restores of many small files from paying a directory fsync per file.
func (r *restorer) syncAllDirs(ctx context.Context) error {
	if !r.opts.Fsync {
		return nil
	}
	dirs := slices.Sorted(maps.Keys(r.syncDirs))
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(r.opts.Concurrency)
	for _, d := range dirs {
		g.Go(func() error {
			if err := ctx.Err(); err != nil {
				return err
			}
			return syncDir(r.root.Open(d))
		})
	}
	// Parents of a target directory this run created.
	for _, d := range r.syncOutside {
		g.Go(func() error { return syncDir(os.Open(d)) })
	}
	return g.Wait()
}

func syncDir(d *os.File, err error) error {
	if err != nil {
		return fmt.Errorf("fsync directory: %w", err)
	}
	defer d.Close()
	err = d.Sync()
	// Some file systems cannot fsync a directory; there is nothing more to do.
	if err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOTSUP) {
		return fmt.Errorf("fsync directory %s: %w", d.Name(), err)
	}
	return nil
}
