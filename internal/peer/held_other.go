//go:build !unix

package peer

import (
	"fmt"
	"os"
)

// openDir opens the folder held files are served from.
func openDir(dir string) (*os.File, error) { return os.Open(dir) }

// openBeneath opens rel below dir through an os.Root (no path out of it);
// identify's size and time checks stand in for the inode's.
func openBeneath(dir *os.File, rel string) (*os.File, error) {
	root, err := os.OpenRoot(dir.Name())
	if err != nil {
		return nil, err
	}
	defer root.Close()
	fi, err := root.Lstat(rel)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("open %s: not a regular file", rel)
	}
	return root.Open(rel)
}

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
