//go:build !unix

package confine

import (
	"fmt"
	"io/fs"
	"os"
	"path"
)

// Without openat, os.Root confines paths: it follows a link only where
// the link stays inside the directory.
type dirHandle struct{ r *os.Root }

func openDir(p string) (dirHandle, error) {
	r, err := os.OpenRoot(p)
	if err != nil {
		return dirHandle{}, err
	}
	return dirHandle{r: r}, nil
}

func (h dirHandle) close() error { return h.r.Close() }

func (d *Dir) open(rel string) (*os.File, error) {
	if _, err := split(rel); err != nil {
		return nil, err
	}
	fi, err := d.dir.r.Lstat(rel)
	if err != nil {
		return nil, err
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		return nil, &fs.PathError{Op: "open", Path: d.name(rel), Err: ErrLink}
	}
	return d.dir.r.Open(rel)
}

func (d *Dir) openDir(rel string) (*os.File, error) {
	if rel == "" {
		rel = "."
	}
	return d.open(rel)
}

func (d *Dir) lstat(rel string) (Stat, error) {
	if rel == "" {
		rel = "."
	}
	fi, err := d.dir.r.Lstat(rel)
	if err != nil {
		return Stat{}, err
	}
	return StatOf(fi), nil
}

func (d *Dir) lstatOwner(rel string) (Stat, Owner, error) {
	st, err := d.lstat(rel)
	return st, Owner{}, err
}

func (d *Dir) removeIf(rel string, remove func(Stat) bool) (bool, error) {
	st, err := d.lstat(rel)
	if err != nil {
		return false, err
	}
	if st.Mode.IsDir() || !remove(st) {
		return false, nil
	}
	if err := d.dir.r.Remove(rel); err != nil {
		return false, err
	}
	return true, nil
}

func (d *Dir) removeDir(rel string) error {
	st, err := d.lstat(rel)
	if err != nil {
		return err
	}
	if !st.Mode.IsDir() {
		return fmt.Errorf("%s: not a directory", path.Join(d.path, rel))
	}
	return d.dir.r.Remove(rel)
}

func sysIdentity(fs.FileInfo) (dev, ino, nlink uint64) { return 0, 0, 0 }
