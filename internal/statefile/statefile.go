// Package statefile keeps a small JSON document in memory and mirrors it to
// one file, written whole (internal/atomicfile): the agent's journal of
// committed steps and the upload state of a push.
//
// Readers never wait on the disk: mu guards the document and is never held
// across I/O. A save encodes a numbered snapshot under mu and writes it
// under writeMu, skipping it when a newer snapshot, which holds every
// change the older one holds, is on disk already; so a save returns once
// its change is on disk, by its own write or a later one. Delete is ordered
// with the saves: it waits for a write in flight, and no save writes after
// it.
package statefile

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/ferrylabs/ferry/internal/atomicfile"
)

// File is a document of type T mirrored to a file. The zero value is not
// usable; make one with New.
type File[T any] struct {
	path    string
	what    string // names the file in errors: "journal", "upload state"
	durable bool

	mu   sync.Mutex
	data T
	seq  uint64 // snapshots taken, under mu

	writeMu sync.Mutex
	written uint64 // the newest snapshot on disk, under writeMu
	deleted bool   // Delete was called, under writeMu
}

// New returns data mirrored to path. Nothing is written until the first
// save. what names the file in errors. A durable file is fsynced (file and
// folder) before a save returns, for records whose loss costs correctness;
// otherwise the page cache holds it, for records that only save work
// (atomicfile.WriteCached says why).
func New[T any](path, what string, data T, durable bool) *File[T] {
	return &File[T]{path: path, what: what, data: data, durable: durable}
}

// Path returns the file's path.
func (f *File[T]) Path() string { return f.path }

// View calls fn with the document under the lock; fn must not keep it or
// change it.
func (f *File[T]) View(fn func(*T)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(&f.data)
}

// Change applies fn to the document without saving: the change goes to disk
// with the next save, if any.
func (f *File[T]) Change(fn func(*T)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(&f.data)
}

// Update applies fn to the document and saves it.
func (f *File[T]) Update(fn func(*T)) error {
	f.mu.Lock()
	fn(&f.data)
	snap, err := f.snapshotLocked()
	f.mu.Unlock()
	return f.write(snap, err)
}

// Save writes the document even if nothing changed.
func (f *File[T]) Save() error {
	return f.Update(func(*T) {})
}

// Delete removes the file and ends its mirroring: a save in flight finishes
// first, and no save writes the file after Delete returns (what it records
// is over). The document stays readable in memory.
func (f *File[T]) Delete() error {
	f.writeMu.Lock()
	defer f.writeMu.Unlock()
	f.deleted = true
	if err := os.Remove(f.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove %s %s: %w", f.what, f.path, err)
	}
	return nil
}

// snapshot is one encoding of the document, numbered in the order taken.
type snapshot struct {
	seq uint64
	raw []byte
}

// snapshotLocked encodes the document; f.mu is held.
func (f *File[T]) snapshotLocked() (snapshot, error) {
	raw, err := json.Marshal(&f.data)
	if err != nil {
		return snapshot{}, fmt.Errorf("encode %s: %w", f.what, err)
	}
	f.seq++
	return snapshot{seq: f.seq, raw: raw}, nil
}

// write writes snap unless a newer snapshot is already on disk or the file
// was deleted.
func (f *File[T]) write(snap snapshot, err error) error {
	if err != nil {
		return err
	}
	f.writeMu.Lock()
	defer f.writeMu.Unlock()
	if f.deleted || snap.seq <= f.written {
		return nil
	}
	write := atomicfile.WriteCached
	if f.durable {
		write = atomicfile.Write
	}
	if err := write(f.path, snap.raw, 0o600); err != nil {
		return fmt.Errorf("save %s: %w", f.what, err)
	}
	f.written = snap.seq
	return nil
}
