//go:build unix

package safepath

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

const dirFlags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC | unix.O_NOFOLLOW

// Check walks every existing folder of path from / and returns a *Problem
// (wrapping ErrUnsafe) for the first one that the user uid could not
// trust, or nil. Folders that do not exist yet are fine: MkdirAll creates
// them the agent's own.
func Check(path string, uid int) error {
	f, err := walk(path, uid, false)
	if f != nil {
		f.Close()
	}
	return err
}

// MkdirAll walks path from / as Check does, creating each missing folder
// (mode 0700) beneath the descriptor of its parent, and returns the last
// folder open. It refuses, before creating or changing anything beneath
// it, a folder another user could replace, and any link on the path.
func MkdirAll(path string, uid int) (*os.File, error) {
	return walk(path, uid, true)
}

func walk(path string, uid int, create bool) (*os.File, error) {
	abs, parts, err := components(path)
	if err != nil {
		return nil, err
	}
	fd, err := unix.Open("/", dirFlags, 0)
	if err != nil {
		return nil, fmt.Errorf("open /: %w", err)
	}
	cur := "/"
	if err := checkFd(fd, cur, uint32(uid), len(parts) == 0); err != nil {
		unix.Close(fd)
		return nil, err
	}
	for i, name := range parts {
		cur = filepath.Join(cur, name)
		next, err := step(fd, name, cur, create)
		unix.Close(fd)
		if err != nil || next < 0 {
			return nil, err
		}
		fd = next
		if err := checkFd(fd, cur, uint32(uid), i == len(parts)-1); err != nil {
			unix.Close(fd)
			return nil, err
		}
	}
	return os.NewFile(uintptr(fd), abs), nil
}

// step opens the folder name beneath fd, creating it when asked; -1 and
// no error means it does not exist and was not to be created.
func step(fd int, name, path string, create bool) (int, error) {
	for {
		next, err := unix.Openat(fd, name, dirFlags, 0)
		switch {
		case err == nil:
			return next, nil
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.ELOOP), errors.Is(err, unix.ENOTDIR):
			return -1, &Problem{Path: path, Reason: "a symbolic link or not a folder (links on the state dir's path are not followed)",
				Fix: "give --state-dir the real path of a folder of the agent's own"}
		case errors.Is(err, unix.ENOENT) && create:
			if err := unix.Mkdirat(fd, name, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
				return -1, fmt.Errorf("create %s: %w", path, err)
			}
			continue
		case errors.Is(err, unix.ENOENT):
			return -1, nil
		default:
			return -1, &fs.PathError{Op: "open", Path: path, Err: err}
		}
	}
}

func checkFd(fd int, path string, uid uint32, last bool) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return &fs.PathError{Op: "stat", Path: path, Err: err}
	}
	mode := fs.FileMode(st.Mode & 0o777)
	if st.Mode&unix.S_ISVTX != 0 {
		mode |= fs.ModeSticky
	}
	if p := verdict(path, uid, st.Uid, mode, last); p != nil {
		return p
	}
	return nil
}
