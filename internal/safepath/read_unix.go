//go:build unix

package safepath

import (
	"errors"
	"syscall"
)

const (
	oNoFollow = syscall.O_NOFOLLOW
	oNonBlock = syscall.O_NONBLOCK
)

func isLoop(err error) bool { return errors.Is(err, syscall.ELOOP) }
