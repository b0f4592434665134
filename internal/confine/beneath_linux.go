package confine

import (
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// noOpenat2 is set once openat2 failed as unavailable (a kernel before
// 5.6, or a seccomp filter refusing it): a property of the machine, so
// every Dir falls back to walking components from then on.
var noOpenat2 atomic.Bool

// beneath opens parts below the directory with flags, following no link:
// one openat2 call, or a walk of the components where openat2 is missing.
func (d *Dir) beneath(parts []string, flags int) (int, error) {
	if !noOpenat2.Load() {
		how := unix.OpenHow{Flags: uint64(flags),
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
		rel := strings.Join(parts, "/")
		// EAGAIN: a rename raced the lookup (RESOLVE_BENEATH asks for a
		// retry); after a few the walk below decides.
		for range 8 {
			fd, err := unix.Openat2(d.dir.fd, rel, &how)
			if err == nil {
				return fd, nil
			}
			if err == unix.ENOSYS || err == unix.EPERM {
				noOpenat2.Store(true)
				break
			}
			if err != unix.EINTR && err != unix.EAGAIN {
				return -1, err
			}
		}
	}
	return d.walk(parts, flags)
}
