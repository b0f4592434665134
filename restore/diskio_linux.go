package restore

import (
	"os"

	"golang.org/x/sys/unix"
)

// startWriteback asks the kernel to begin writing [off, off+n) of f to disk
// without waiting for it. Called behind the hash frontier, it overlaps the
// disk writes with the download, so the fsync before the rename has little
// left to wait for. Errors are ignored: fsync reports any real failure.
func startWriteback(f *os.File, off, n int64) {
	_ = unix.SyncFileRange(int(f.Fd()), off, n, unix.SYNC_FILE_RANGE_WRITE)
}
