package filestore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"syscall"

	"github.com/ferrylabs/ferry/internal/store"
)

// errListDone ends a walk that has listed maxKeys objects.
var errListDone = errors.New("listed maxKeys objects")

// List implements store.Store. It walks the folders depth first, each
// folder's entries in the order of their keys (a folder sorts as its name
// and a slash, which puts "a-x" before "a/1" as S3 does), and descends
// only into folders that can hold keys under prefix and after startAfter.
// The reserved folder, links and other non-regular files are not objects.
func (s *Store) List(ctx context.Context, prefix, startAfter string, maxKeys int, fn func(store.ObjectInfo) error) error {
	s.count("ListObjectsV2")
	l := &lister{s: s, ctx: ctx, prefix: prefix, after: startAfter, max: maxKeys, fn: fn}
	err := l.walk("")
	if errors.Is(err, errListDone) || err == store.ErrStopList {
		return nil
	}
	return err
}

type lister struct {
	s             *Store
	ctx           context.Context
	prefix, after string
	max, listed   int
	fn            func(store.ObjectInfo) error
}

// entry is a folder entry and the key it sorts by: a file's key, or a
// folder's key and a slash.
type entry struct {
	de   fs.DirEntry
	sort string
}

// walk lists the objects in the folder whose keys start with dir ("" for
// the root, else ending in a slash).
func (l *lister) walk(dir string) error {
	entries, err := l.entries(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := l.ctx.Err(); err != nil {
			return err
		}
		if e.de.IsDir() {
			if !l.mayHold(e.sort) {
				continue
			}
			if err := l.walk(e.sort); err != nil {
				return err
			}
			continue
		}
		if !strings.HasPrefix(e.sort, l.prefix) || e.sort <= l.after {
			continue
		}
		fi, err := e.de.Info()
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted since the folder was read
		}
		if err != nil {
			return fmt.Errorf("list %s: %w", e.sort, err)
		}
		if err := l.fn(objectInfo(e.sort, fi)); err != nil {
			return err
		}
		if l.listed++; l.max > 0 && l.listed >= l.max {
			return errListDone
		}
	}
	return nil
}

// mayHold reports whether the folder of keys starting with dir (ending in
// a slash) can hold a key to list.
func (l *lister) mayHold(dir string) bool {
	if !strings.HasPrefix(dir, l.prefix) && !strings.HasPrefix(l.prefix, dir) {
		return false
	}
	// Every key below dir is greater than dir; if startAfter is greater
	// than dir without starting with it, every key below is smaller.
	return l.after < dir || strings.HasPrefix(l.after, dir)
}

// entries reads the folder of keys starting with dir, in key order,
// without what is not an object or a folder of objects.
func (l *lister) entries(dir string) ([]entry, error) {
	name := strings.TrimSuffix(dir, "/")
	if name == "" {
		name = "."
	}
	f, err := l.s.root.Open(name)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return nil, nil // removed since its parent was read
	}
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", name, err)
	}
	des, err := f.ReadDir(-1)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", name, err)
	}
	out := make([]entry, 0, len(des))
	for _, de := range des {
		switch {
		case dir == "" && de.Name() == metaDir:
		case de.IsDir():
			out = append(out, entry{de: de, sort: dir + de.Name() + "/"})
		case de.Type().IsRegular():
			out = append(out, entry{de: de, sort: dir + de.Name()})
		}
	}
	slices.SortFunc(out, func(a, b entry) int { return strings.Compare(a.sort, b.sort) })
	return out, nil
}
