//go:build !unix

package safepath

import "os"

// Check cannot read owners here: it only resolves the path.
func Check(path string, uid int) error {
	_, err := os.Lstat(path)
	if os.IsNotExist(err) {
		return nil
	}
	return err
}

// MkdirAll creates path owner-only and opens it.
func MkdirAll(path string, uid int) (*os.File, error) {
	if err := os.MkdirAll(path, 0o700); err != nil {
		return nil, err
	}
	return os.Open(path)
}
