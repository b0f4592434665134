//go:build unix

package uploader

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// openRegular opens a file to upload without following a symbolic link in
// its last component and returns it with the stamp of what was opened. A
// file scanned as regular and swapped for a link before its upload (to
// leave the checkpoint directory, say) is refused, not followed.
func openRegular(path string) (*os.File, fileStamp, error) {
	// O_NONBLOCK: a FIFO swapped in opens at once (and is refused below)
	// instead of blocking the upload; regular files ignore it.
	fh, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if errors.Is(err, syscall.ELOOP) {
		return nil, fileStamp{}, fmt.Errorf("%s is now a symbolic link (it was a regular file when scanned): not followed", path)
	}
	if err != nil {
		return nil, fileStamp{}, err
	}
	return stampOpen(fh, path)
}
