// Package confine reads, inspects and removes files beneath one directory
// without ever leaving it: every path is resolved from an open descriptor
// of the directory, component by component, and no symbolic link is
// followed on the way, in the last component or before it. The agent runs
// with more rights than the trainer that writes its watch dir (often as
// root), so a step folder swapped for a link to /etc after the scan must
// not make it read, upload or delete anything there.
//
// On Linux one openat2(2) call with RESOLVE_BENEATH and RESOLVE_NO_SYMLINKS
// resolves a path; where the kernel lacks it (before 5.6, or a seccomp
// filter refusing it) and on other Unix systems each component is opened
// with O_NOFOLLOW in turn. Elsewhere os.Root confines the path, following
// only links that stay inside the directory.
package confine

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// ErrLink is returned (wrapped) when a path beneath the directory passes
// through a symbolic link, or is one: ferry follows none.
var ErrLink = errors.New("a symbolic link on the way (not followed)")

// ErrNotRegular is returned (wrapped) by OpenRegular for a FIFO, socket,
// device or directory where a regular file was expected.
var ErrNotRegular = errors.New("not a regular file")

// ErrHardLinks is returned (wrapped) by OpenRegular for a regular file with
// more than one hard link: its other name may lie outside the directory
// (a file the trainer could not read itself, linked in), so ferry does not
// read it.
var ErrHardLinks = errors.New("has more than one hard link")

// Dir is an open directory beneath which paths are resolved. It is safe
// for concurrent use.
type Dir struct {
	path string
	dir  dirHandle
}

// Open opens the directory at path. The path itself is resolved as given
// (links in it are the operator's choice); nothing is resolved beneath it
// but through the open descriptor.
func Open(path string) (*Dir, error) {
	h, err := openDir(path)
	if err != nil {
		return nil, fmt.Errorf("open directory %s: %w", path, err)
	}
	return &Dir{path: path, dir: h}, nil
}

// Path returns the path the directory was opened by.
func (d *Dir) Path() string { return d.path }

// Close releases the directory.
func (d *Dir) Close() error { return d.dir.close() }

// Stat is what ferry compares of a file: its type, size, modification
// time and identity (device and inode, 0 where the platform does not
// give them) and link count.
type Stat struct {
	Mode    fs.FileMode // type bits only
	Size    int64
	ModTime time.Time
	Dev     uint64
	Ino     uint64
	Nlink   uint64
}

// IsRegular reports whether the file is a regular file.
func (s Stat) IsRegular() bool { return s.Mode.Type() == 0 }

// StatOf returns the Stat of a FileInfo from os.Stat, os.Lstat or
// (*os.File).Stat.
func StatOf(fi fs.FileInfo) Stat {
	s := Stat{Mode: fi.Mode().Type(), Size: fi.Size(), ModTime: fi.ModTime()}
	s.Dev, s.Ino, s.Nlink = sysIdentity(fi)
	return s
}

// OpenRegular opens the regular file at rel (slash-separated, relative to
// the directory) for reading and returns it with what fstat says of it.
// A FIFO opens without blocking and is refused like a socket or device
// (ErrNotRegular); a file with several hard links is refused
// (ErrHardLinks); a link on the way is refused (ErrLink).
func (d *Dir) OpenRegular(rel string) (*os.File, Stat, error) {
	f, err := d.open(rel)
	if err != nil {
		return nil, Stat{}, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, Stat{}, err
	}
	st := StatOf(fi)
	if err := CheckRegular(f.Name(), st); err != nil {
		f.Close()
		return nil, Stat{}, err
	}
	return f, st, nil
}

// CheckRegular returns why a file named name that stat describes is not
// one ferry reads: not regular, or linked more than once.
func CheckRegular(name string, st Stat) error {
	if !st.IsRegular() {
		return fmt.Errorf("%s: %w (%s): not read", name, ErrNotRegular, typeName(st.Mode))
	}
	if st.Nlink > 1 {
		return fmt.Errorf("%s %w (%d): not read, since another of its names may be a file outside the watched directory; copy it instead of linking it", name, ErrHardLinks, st.Nlink)
	}
	return nil
}

func typeName(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeDevice != 0:
		return "a device"
	case m.IsDir():
		return "a directory"
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	}
	return "a special file"
}

// OpenFile opens whatever is at rel for reading, beneath the directory
// and following no link, without blocking on a FIFO; unlike OpenRegular it
// checks neither the type nor the links, for a caller that only asks the
// kernel about the file (a lease) and reads nothing.
func (d *Dir) OpenFile(rel string) (*os.File, error) { return d.open(rel) }

// Lstat describes the file at rel without following it if it is a link;
// a link before it is refused (ErrLink).
func (d *Dir) Lstat(rel string) (Stat, error) { return d.lstat(rel) }

// OpenDir opens the directory at rel for listing (ReadDir); "" is the
// directory itself.
func (d *Dir) OpenDir(rel string) (*os.File, error) { return d.openDir(rel) }

// RemoveIf removes the file at rel (never a directory) if keep reports
// false for what lstat says of it, and reports whether it did. The file is
// examined and unlinked from the same open descriptor of its folder, so a
// link swapped in for a folder on the way is refused, not followed.
func (d *Dir) RemoveIf(rel string, remove func(Stat) bool) (bool, error) {
	return d.removeIf(rel, remove)
}

// RemoveEmptyDir removes the directory at rel if it is empty; a link there
// is not removed.
func (d *Dir) RemoveEmptyDir(rel string) error { return d.removeDir(rel) }

// name joins rel to the directory's path, for messages.
func (d *Dir) name(rel string) string {
	if rel == "" {
		return d.path
	}
	return filepath.Join(d.path, filepath.FromSlash(rel))
}

// split checks rel and returns its components: slash-separated, relative,
// no "." or ".." and no empty component.
func split(rel string) ([]string, error) {
	if rel == "" {
		return nil, nil
	}
	parts := strings.Split(rel, "/")
	for _, p := range parts {
		if p == "" || p == "." || p == ".." || strings.ContainsRune(p, 0) || strings.ContainsRune(p, filepath.Separator) && filepath.Separator != '/' {
			return nil, fmt.Errorf("path %q: not a clean relative path", rel)
		}
	}
	return parts, nil
}
