package s3store

import (
	"net"
	"syscall"
	"unsafe"
)

// outq returns the bytes in c's send queue (sent but not acknowledged,
// and not yet sent), or -1 when unknown.
func outq(c net.Conn) int64 {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return -1
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return -1
	}
	n := int32(-1)
	cerr := raw.Control(func(fd uintptr) {
		if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCOUTQ, uintptr(unsafe.Pointer(&n))); errno != 0 {
			n = -1
		}
	})
	if cerr != nil {
		return -1
	}
	return int64(n)
}
