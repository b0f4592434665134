//go:build !unix

package uploader

import "os"

// openRegular opens a file to upload and returns it with the stamp of what
// was opened; it must be a regular file.
func openRegular(path string) (*os.File, fileStamp, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, fileStamp{}, err
	}
	return stampOpen(fh, path)
}
