//go:build !linux

package restore

import "os"

// enableDirect leaves f buffered: direct I/O is used on Linux only.
func enableDirect(f *os.File) int64 { return 0 }

// disableDirect is never needed where enableDirect does nothing.
func disableDirect(f *os.File, err error) bool { return false }

// preallocate does nothing where fallocate does not exist.
func preallocate(f *os.File, n int64) error { return nil }

// startWriteback is a no-op where sync_file_range does not exist; the
// fsync before the rename does all the work.
func startWriteback(f *os.File, off, n int64) {}

// openNonBlock is 0 where no flag is known to keep open from waiting.
const openNonBlock = 0
