//go:build unix

package peer

import (
	"fmt"
	"os"
	"syscall"
)

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
