// Package atomicfile writes small files whole: through a temp file in the
// same directory, renamed into place, so that a reader, or the process
// started after a crash, finds the old content or the new, never part of
// either.
package atomicfile

import (
	"fmt"
	"os"
	"path/filepath"
)

// Write writes data to path atomically and durably: the temp file is
// fsynced before the rename and the directory after it, so the new content
// survives a power cut once Write returns. The directory is created (mode
// 0700) if needed. For records whose loss costs correctness (the agent's
// journal of committed steps, a state folder's identity).
func Write(path string, data []byte, perm os.FileMode) error {
	return write(path, data, perm, true)
}

// WriteCached writes data to path atomically but without an fsync: the new
// content survives the process being killed (the page cache holds it), and
// a power cut leaves the old content, or on some file systems an empty
// file. For records that only save work, whose loss costs a redo, never a
// wrong result: an fsync on the checkpoint's file system can wait a long
// time behind the trainer's writeback.
func WriteCached(path string, data []byte, perm os.FileMode) error {
	return write(path, data, perm, false)
}

func write(path string, data []byte, perm os.FileMode, durable bool) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if err := fill(tmp, data, perm, durable); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("rename into %s: %w", path, err)
	}
	if durable {
		return SyncDir(dir)
	}
	return nil
}

// fill writes data to f, sets its mode and, when durable, fsyncs it.
func fill(f *os.File, data []byte, perm os.FileMode, durable bool) error {
	if _, err := f.Write(data); err != nil {
		return err
	}
	if err := f.Chmod(perm); err != nil {
		return err
	}
	if durable {
		return f.Sync()
	}
	return nil
}

// SyncDir makes the renames and removals in dir durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync dir %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync dir %s: %w", dir, err)
	}
	return nil
}
