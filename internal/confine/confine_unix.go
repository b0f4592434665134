//go:build unix

package confine

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// dirHandle is the open directory; fd is f's descriptor, read once.
type dirHandle struct {
	f  *os.File
	fd int
}

func openDir(path string) (dirHandle, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return dirHandle{}, err
	}
	return dirHandle{f: f, fd: int(f.Fd())}, nil
}

func (h dirHandle) close() error { return h.f.Close() }

// readFlags open a file for reading: a FIFO swapped in opens at once
// (and is refused by its type) instead of blocking; regular files ignore
// O_NONBLOCK.
const readFlags = unix.O_RDONLY | unix.O_NONBLOCK | unix.O_NOCTTY | unix.O_CLOEXEC | unix.O_NOFOLLOW

func (d *Dir) open(rel string) (*os.File, error) {
	parts, err := split(rel)
	if err != nil {
		return nil, err
	}
	if len(parts) == 0 {
		return nil, fmt.Errorf("%s: %w", d.path, ErrNotRegular)
	}
	fd, err := d.beneath(parts, readFlags)
	if err != nil {
		return nil, d.pathErr("open", rel, err)
	}
	return os.NewFile(uintptr(fd), d.name(rel)), nil
}

func (d *Dir) openDir(rel string) (*os.File, error) {
	parts, err := split(rel)
	if err != nil {
		return nil, err
	}
	if len(parts) == 0 {
		parts = []string{"."}
	}
	fd, err := d.beneath(parts, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW)
	if err != nil {
		return nil, d.pathErr("open", rel, err)
	}
	return os.NewFile(uintptr(fd), d.name(rel)), nil
}

// parent opens the folder holding the last component of rel and returns
// it (to be closed) with that component's name.
func (d *Dir) parent(rel string) (int, string, error) {
	parts, err := split(rel)
	if err != nil {
		return -1, "", err
	}
	if len(parts) == 0 {
		return -1, "", fmt.Errorf("%s: the directory itself", d.path)
	}
	dir := append(parts[:len(parts)-1:len(parts)-1], ".")
	fd, err := d.beneath(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW)
	if err != nil {
		return -1, "", d.pathErr("open", rel, err)
	}
	return fd, parts[len(parts)-1], nil
}

func (d *Dir) lstat(rel string) (Stat, error) {
	st, _, err := d.lstatOwner(rel)
	return st, err
}

func (d *Dir) lstatOwner(rel string) (Stat, Owner, error) {
	var st unix.Stat_t
	if rel == "" {
		if err := unix.Fstat(d.dir.fd, &st); err != nil {
			return Stat{}, Owner{}, err
		}
	} else {
		fd, name, err := d.parent(rel)
		if err != nil {
			return Stat{}, Owner{}, err
		}
		defer unix.Close(fd)
		if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return Stat{}, Owner{}, d.pathErr("lstat", rel, err)
		}
	}
	return statOfSys(&st), Owner{UID: st.Uid, GID: st.Gid, Perm: fs.FileMode(st.Mode) & fs.ModePerm, Known: true}, nil
}

func (d *Dir) removeIf(rel string, remove func(Stat) bool) (bool, error) {
	fd, name, err := d.parent(rel)
	if err != nil {
		return false, err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return false, d.pathErr("lstat", rel, err)
	}
	s := statOfSys(&st)
	if s.Mode.IsDir() || !remove(s) {
		return false, nil
	}
	if err := unix.Unlinkat(fd, name, 0); err != nil {
		return false, d.pathErr("remove", rel, err)
	}
	return true, nil
}

func (d *Dir) removeDir(rel string) error {
	fd, name, err := d.parent(rel)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.Unlinkat(fd, name, unix.AT_REMOVEDIR); err != nil {
		return d.pathErr("remove", rel, err)
	}
	return nil
}

// walk opens parts one at a time from the directory, each folder with
// O_NOFOLLOW, the last with flags (which hold O_NOFOLLOW), and returns the
// last descriptor.
func (d *Dir) walk(parts []string, flags int) (int, error) {
	fd := d.dir.fd
	for i, p := range parts {
		f := unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC | unix.O_NOFOLLOW
		if i == len(parts)-1 {
			f = flags
		}
		next, err := openatRetry(fd, p, f)
		if i > 0 {
			unix.Close(fd)
		}
		if err != nil {
			return -1, err
		}
		fd = next
	}
	return fd, nil
}

func openatRetry(fd int, name string, flags int) (int, error) {
	for {
		n, err := unix.Openat(fd, name, flags, 0)
		if err != unix.EINTR {
			return n, err
		}
	}
}

// pathErr names the path in err, and says what a link on the way means.
func (d *Dir) pathErr(op, rel string, err error) error {
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EXDEV) {
		err = ErrLink
	} else if errors.Is(err, unix.ENOTDIR) {
		// A folder on the way replaced by a file or a link to one.
		err = fmt.Errorf("%w (or a folder on the way is no longer one)", ErrLink)
	}
	return &fs.PathError{Op: op, Path: d.name(rel), Err: err}
}

func statOfSys(st *unix.Stat_t) Stat {
	var mode fs.FileMode
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
	case unix.S_IFDIR:
		mode = fs.ModeDir
	case unix.S_IFLNK:
		mode = fs.ModeSymlink
	case unix.S_IFIFO:
		mode = fs.ModeNamedPipe
	case unix.S_IFSOCK:
		mode = fs.ModeSocket
	case unix.S_IFCHR:
		mode = fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFBLK:
		mode = fs.ModeDevice
	default:
		mode = fs.ModeIrregular
	}
	sec, nsec := st.Mtim.Unix()
	return Stat{Mode: mode, Size: st.Size, ModTime: time.Unix(sec, nsec),
		Dev: uint64(st.Dev), Ino: uint64(st.Ino), Nlink: uint64(st.Nlink)}
}

func sysIdentity(fi fs.FileInfo) (dev, ino, nlink uint64) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0, 0
	}
	return uint64(st.Dev), uint64(st.Ino), uint64(st.Nlink)
}
