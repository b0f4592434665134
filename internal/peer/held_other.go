//go:build !unix

package peer

import (
	"fmt"
	"os"
)

// identify returns what identifies an open file, and how many names it
// has (1: not known here).
func identify(f *os.File) (fileID, uint64, error) {
	fi, err := f.Stat()
	if err != nil {
		return fileID{}, 0, err
	}
	if !fi.Mode().IsRegular() {
		return fileID{}, 0, fmt.Errorf("%s: not a regular file", f.Name())
	}
	return fileID{size: fi.Size(), mtime: fi.ModTime().UnixNano()}, 1, nil
}
