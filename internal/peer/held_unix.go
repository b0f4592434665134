//go:build unix

package peer

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// openDir opens the folder held files are served from.
func openDir(dir string) (*os.File, error) {
	return os.OpenFile(dir, os.O_RDONLY|syscall.O_DIRECTORY, 0)
}

// openBeneath opens rel below dir without following any symbolic link,
// in the folders on the way or at the end: a folder swapped for a link
// after the file was planned leads nowhere. Anything but a regular file
// is refused before it is opened (a FIFO would block, a device could act
// on being opened).
func openBeneath(dir *os.File, rel string) (*os.File, error) {
	parts := strings.Split(filepath.ToSlash(rel), "/")
	for _, p := range parts {
		if p == "" || p == "." || p == ".." {
			return nil, fmt.Errorf("%s: not a plain path below the folder", rel)
		}
	}
	raw, err := dir.SyscallConn()
	if err != nil {
		return nil, err
	}
	var fd int
	var openErr error
	cerr := raw.Control(func(dirfd uintptr) { fd, openErr = openPath(int(dirfd), parts, rel) })
	if err := errors.Join(cerr, openErr); err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), filepath.Join(dir.Name(), rel)), nil
}

func openPath(dirfd int, parts []string, rel string) (int, error) {
	parent, owned := dirfd, false
	defer func() {
		if owned {
			unix.Close(parent)
		}
	}()
	for _, p := range parts[:len(parts)-1] {
		fd, err := unix.Openat(parent, p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return -1, fmt.Errorf("open %s: folder %s: %w", rel, p, err)
		}
		if owned {
			unix.Close(parent)
		}
		parent, owned = fd, true
	}
	last := parts[len(parts)-1]
	var st unix.Stat_t
	if err := unix.Fstatat(parent, last, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return -1, fmt.Errorf("open %s: %w", rel, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return -1, fmt.Errorf("open %s: not a regular file", rel)
	}
	fd, err := unix.Openat(parent, last, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open %s: %w", rel, err)
	}
	return fd, nil
}

// identify returns what identifies an open file, and how many names it
// has.
func identify(f *os.File) (fileID, uint64, error) {
	fi, err := f.Stat()
	if err != nil {
		return fileID{}, 0, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || !fi.Mode().IsRegular() {
		return fileID{}, 0, fmt.Errorf("%s: not a regular file", f.Name())
	}
	return fileID{dev: uint64(st.Dev), ino: uint64(st.Ino), size: fi.Size(), mtime: fi.ModTime().UnixNano()}, uint64(st.Nlink), nil
}
