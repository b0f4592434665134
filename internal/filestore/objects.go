package filestore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"

	"github.com/ferrylabs/ferry/internal/store"
)

// Put implements store.Store: the body goes to a temporary file, which is
// checked against opts.CRC32C, fsynced, then linked (create-only) or
// renamed (replacement) to key.
func (s *Store) Put(ctx context.Context, key string, body io.ReadSeeker, size int64, opts store.PutOptions) (store.ObjectInfo, error) {
	s.count("PutObject")
	if err := checkKey(key); err != nil {
		return store.ObjectInfo{}, fmt.Errorf("put: %w", err)
	}
	if opts.IfNoneMatch && opts.IfMatch != "" {
		return store.ObjectInfo{}, fmt.Errorf("put %s: both If-None-Match and If-Match set", key)
	}
	t, err := s.writeTemp(ctx, body, size, opts.CRC32C)
	if err != nil {
		return store.ObjectInfo{}, fmt.Errorf("put %s: %w", key, err)
	}
	if opts.IfNoneMatch {
		err = s.create(t, key)
	} else {
		err = s.replace(ctx, t, key, opts.IfMatch)
	}
	if err != nil {
		return store.ObjectInfo{}, fmt.Errorf("put %s: %w", key, err)
	}
	return objectInfo(key, t.info), nil
}

// object is an open object and its size.
type object struct {
	*io.LimitedReader
	f *os.File
}

func (o object) Close() error { return o.f.Close() }

// Get implements store.Store.
func (s *Store) Get(ctx context.Context, key string, off, length int64) (io.ReadCloser, error) {
	s.count("GetObject")
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := checkKey(key); err != nil {
		return nil, fmt.Errorf("get: %w", err)
	}
	f, err := s.root.Open(key)
	if err != nil {
		return nil, notExist(err, "get "+key)
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = fmt.Errorf("not a regular file: %w", fs.ErrNotExist)
	}
	if err == nil && (off < 0 || off > fi.Size()) {
		err = fmt.Errorf("range start %d outside object of %d bytes", off, fi.Size())
	}
	if err == nil {
		_, err = f.Seek(off, io.SeekStart)
	}
	if err != nil {
		f.Close()
		return nil, notExist(err, "get "+key)
	}
	n := fi.Size() - off
	if length >= 0 {
		n = min(n, length)
	}
	return object{LimitedReader: &io.LimitedReader{R: f, N: n}, f: f}, nil
}

// Head implements store.Store.
func (s *Store) Head(ctx context.Context, key string) (store.ObjectInfo, error) {
	s.count("HeadObject")
	if err := ctx.Err(); err != nil {
		return store.ObjectInfo{}, err
	}
	if err := checkKey(key); err != nil {
		return store.ObjectInfo{}, fmt.Errorf("head: %w", err)
	}
	fi, err := s.root.Lstat(key)
	if err == nil && !fi.Mode().IsRegular() {
		err = fs.ErrNotExist
	}
	if err != nil {
		return store.ObjectInfo{}, notExist(err, "head "+key)
	}
	return objectInfo(key, fi), nil
}

// Delete implements store.Store. It takes key's lock, so that a
// conditional replacement never brings back an object deleted after its
// compare.
func (s *Store) Delete(ctx context.Context, key string) error {
	s.count("DeleteObject")
	if err := checkKey(key); err != nil {
		return fmt.Errorf("delete: %w", err)
	}
	fi, err := s.root.Lstat(key)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) || (err == nil && fi.IsDir()) {
		return nil
	}
	unlock, err := s.lockKey(ctx, key)
	if err != nil {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	err = s.root.Remove(key)
	unlock()
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	if err := s.syncDir(parent(key)); err != nil {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	s.removeEmptyParents(key)
	return nil
}
