package pagecache

import (
	"fmt"
	"os"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

var pageSize = int64(os.Getpagesize())

// Snapshot records which of the first size bytes of f are cached (mincore
// over a read-only mapping: nothing is read or faulted in). It returns nil
// for an empty file.
func Snapshot(f *os.File, size int64) (*Residency, error) {
	if size <= 0 {
		return nil, nil
	}
	m, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("page cache snapshot: map %s: %w", f.Name(), err)
	}
	defer unix.Munmap(m) //nolint:errcheck // nothing to do; the mapping was never touched
	r := &Residency{size: size, cached: make([]byte, (size+pageSize-1)/pageSize)}
	_, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(size), uintptr(unsafe.Pointer(&r.cached[0])))
	if errno != 0 {
		return nil, fmt.Errorf("page cache snapshot: mincore %s: %w", f.Name(), errno)
	}
	return r, nil
}

// DropOthers advises the kernel to drop the pages of f that were not
// cached at Snapshot (POSIX_FADV_DONTNEED on each run of them). Dirty
// pages are not dropped by the kernel, so nothing unwritten is lost.
func (r *Residency) DropOthers(f *os.File) error {
	if r == nil {
		return nil
	}
	// The kernel skips pages it cannot drop at that moment (locked for
	// I/O, held in another CPU's LRU batch): look again and retry a few
	// times, briefly.
	for attempt := 1; ; attempt++ {
		if err := r.dropOnce(f); err != nil {
			return err
		}
		now, err := Snapshot(f, r.size)
		if err != nil || now == nil || !r.othersCached(now) || attempt == dropAttempts {
			return err
		}
		time.Sleep(dropRetryWait)
	}
}

// Retries of DropOthers.
const (
	dropAttempts  = 3
	dropRetryWait = 10 * time.Millisecond
)

// othersCached reports whether now has a page cached that r did not.
func (r *Residency) othersCached(now *Residency) bool {
	for i, b := range now.cached {
		if b&1 != 0 && r.cached[i]&1 == 0 {
			return true
		}
	}
	return false
}

// dropOnce advises the kernel to drop each run of pages not cached at
// Snapshot.
func (r *Residency) dropOnce(f *os.File) error {
	for i := 0; i < len(r.cached); {
		if r.cached[i]&1 != 0 {
			i++
			continue
		}
		j := i
		for j < len(r.cached) && r.cached[j]&1 == 0 {
			j++
		}
		off := int64(i) * pageSize
		n := min(int64(j)*pageSize, r.size) - off
		if err := unix.Fadvise(int(f.Fd()), off, n, unix.FADV_DONTNEED); err != nil {
			return fmt.Errorf("drop pages of %s: %w", f.Name(), err)
		}
		i = j
	}
	return nil
}

// Cached counts the pages of the first size bytes of f in the page cache.
func Cached(f *os.File, size int64) (pages, total int, err error) {
	r, err := Snapshot(f, size)
	if err != nil || r == nil {
		return 0, 0, err
	}
	for _, b := range r.cached {
		if b&1 != 0 {
			pages++
		}
	}
	return pages, len(r.cached), nil
}
