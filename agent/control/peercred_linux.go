//go:build linux

package control

import (
	"errors"
	"fmt"
	"net"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// peerOf reads the credentials of the process that connected c: uid, gid
// and pid from SO_PEERCRED, supplementary groups from SO_PEERGROUPS. Both
// are what the kernel recorded at connect(2), so a caller cannot change
// them afterwards and no pid reuse can mix up two processes (which reading
// /proc/<pid>/status could).
func peerOf(c *net.UnixConn) (Peer, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return Peer{}, fmt.Errorf("peer credentials: %w", err)
	}
	var (
		cred   *unix.Ucred
		groups []uint32
		cerr   error
	)
	err = raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
		if cerr == nil {
			groups = peerGroups(int(fd))
		}
	})
	if err == nil {
		err = cerr
	}
	if err != nil {
		return Peer{}, fmt.Errorf("peer credentials: %w", err)
	}
	return Peer{Known: true, PID: cred.Pid, UID: cred.Uid, GID: cred.Gid, Groups: groups}, nil
}

// peerGroups returns the caller's supplementary groups, or nil where the
// kernel does not give them (before 4.13): then only the primary group
// counts, which can refuse a member but never admits anyone wrongly.
func peerGroups(fd int) []uint32 {
	buf := make([]uint32, 64)
	for range 3 {
		n := uint32(len(buf) * 4)
		_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_PEERGROUPS,
			uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&n)), 0)
		switch {
		case errno == 0:
			return buf[:n/4]
		case errors.Is(errno, unix.ERANGE) && int(n/4) > len(buf):
			buf = make([]uint32, n/4)
		default:
			return nil
		}
	}
	return nil
}

// fileOwner returns the owner and group of a FileInfo's Sys().
func fileOwner(sys any) (uid, gid uint32, ok bool) {
	st, ok := sys.(*syscall.Stat_t)
	if !ok {
		return 0, 0, false
	}
	return st.Uid, st.Gid, true
}
