//go:build !linux

package pagecache

import "os"

// Snapshot records nothing outside Linux.
func Snapshot(f *os.File, size int64) (*Residency, error) { return nil, nil }

// DropOthers does nothing outside Linux.
func (r *Residency) DropOthers(f *os.File) error { return nil }
