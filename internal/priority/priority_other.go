//go:build !linux

package priority

import "errors"

// Lower is not supported outside Linux.
func Lower() (Applied, error) {
	return Applied{}, errors.New("lowering the priority needs Linux")
}

// Threads is not supported outside Linux.
func Threads(pid int) ([]Thread, error) {
	return nil, errors.New("reading thread priorities needs Linux")
}

// Reexec is not supported outside Linux.
func Reexec() error {
	return errors.New("lowering the priority needs Linux")
}
