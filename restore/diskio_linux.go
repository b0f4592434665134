package restore

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// enableDirect switches f, a new empty temp file, to direct I/O (O_DIRECT)
// and returns the alignment that offsets, lengths and buffer addresses of
// its writes then need, or 0 if f stays buffered (the filesystem has no
// direct I/O, as tmpfs and some FUSE and network filesystems).
//
// Direct writes go from the worker's buffer to the device: no copy into
// the page cache, no dirty pages for writeback, and the fsync before the
// rename only has metadata left. That copy was most of the CPU a restore
// spent (ferry's and the peers' alike), and a restored checkpoint is read
// once, by the trainer, so caching it buys little.
func enableDirect(f *os.File) int64 {
	align := int64(defaultDirectAlign)
	raw, err := f.SyscallConn()
	if err != nil {
		return 0
	}
	ok := false
	raw.Control(func(fd uintptr) {
		var st unix.Statx_t
		if unix.Statx(int(fd), "", unix.AT_EMPTY_PATH, unix.STATX_DIOALIGN, &st) == nil && st.Mask&unix.STATX_DIOALIGN != 0 {
			if st.Dio_offset_align == 0 {
				return // the filesystem says: no direct I/O
			}
			align = max(int64(st.Dio_offset_align), int64(st.Dio_mem_align))
		}
		if align > directBufAlign || align&(align-1) != 0 {
			return // stricter than the buffers can meet
		}
		flags, err := unix.FcntlInt(fd, unix.F_GETFL, 0)
		if err != nil {
			return
		}
		_, err = unix.FcntlInt(fd, unix.F_SETFL, flags|unix.O_DIRECT)
		ok = err == nil
	})
	if !ok {
		return 0
	}
	return align
}

// disableDirect turns direct I/O off again after the device refused an
// aligned direct write (EINVAL): the write is then retried buffered.
func disableDirect(f *os.File, err error) bool {
	if !errors.Is(err, unix.EINVAL) {
		return false
	}
	raw, rerr := f.SyscallConn()
	if rerr != nil {
		return false
	}
	ok := false
	raw.Control(func(fd uintptr) {
		flags, err := unix.FcntlInt(fd, unix.F_GETFL, 0)
		if err == nil && flags&unix.O_DIRECT != 0 {
			_, err = unix.FcntlInt(fd, unix.F_SETFL, flags&^unix.O_DIRECT)
			ok = err == nil
		}
	})
	return ok
}

// preallocate reserves n bytes for f, so a full disk fails the file before
// its download starts, and direct writes land in allocated extents, which
// workers may write in parallel. Filesystems without fallocate are fine.
func preallocate(f *os.File, n int64) error {
	if n <= 0 {
		return nil
	}
	raw, err := f.SyscallConn()
	if err != nil {
		return nil
	}
	var ferr error
	raw.Control(func(fd uintptr) {
		for {
			ferr = unix.Fallocate(int(fd), 0, 0, n)
			if ferr != unix.EINTR {
				break
			}
		}
	})
	if errors.Is(ferr, unix.EOPNOTSUPP) || errors.Is(ferr, unix.ENOSYS) {
		return nil
	}
	if ferr != nil {
		return &os.PathError{Op: "preallocate", Path: f.Name(), Err: ferr}
	}
	return nil
}

// startWriteback asks the kernel to begin writing [off, off+n) of a
// buffered f to disk without waiting for it, so the fsync before the rename
// has little left to wait for. Errors are ignored: fsync reports any real
// failure.
func startWriteback(f *os.File, off, n int64) {
	_ = unix.SyncFileRange(int(f.Fd()), off, n, unix.SYNC_FILE_RANGE_WRITE)
}

// openNonBlock opens without waiting: a FIFO's open returns at once.
const openNonBlock = unix.O_NONBLOCK
