package filestore

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"syscall"
	"time"

	"github.com/ferrylabs/ferry/internal/store"
)

// temp is a fully written, fsynced temporary file under tmpDir, not yet
// visible under any key.
type temp struct {
	name string
	info fs.FileInfo
}

// createTemp creates an empty temporary file on the root's filesystem, so
// that it can be linked or renamed to a key.
func (s *Store) createTemp() (*os.File, string, error) {
	name := tmpDir + "/" + randomName()
	f, err := s.root.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if errors.Is(err, fs.ErrNotExist) {
		if err := s.mkdirMeta(tmpDir); err != nil {
			return nil, "", err
		}
		f, err = s.root.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	}
	if err != nil {
		return nil, "", fmt.Errorf("create temporary file: %w", err)
	}
	return f, name, nil
}

// ctxReader ends a copy when its context is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// writeTemp copies exactly size bytes of body into a new temporary file,
// checks them against crc32c when it is set, and makes the file durable.
// On error nothing is left behind.
func (s *Store) writeTemp(ctx context.Context, body io.ReadSeeker, size int64, crc32c string) (temp, error) {
	if _, err := body.Seek(0, io.SeekStart); err != nil {
		return temp{}, fmt.Errorf("rewind body: %w", err)
	}
	f, name, err := s.createTemp()
	if err != nil {
		return temp{}, err
	}
	t, err := s.fillTemp(ctx, f, name, func(w *os.File) (uint32, error) {
		h := crc32.New(crc32.MakeTable(crc32.Castagnoli))
		bp := s.bufs.Get().(*[]byte)
		defer s.bufs.Put(bp)
		n, err := io.CopyBuffer(io.MultiWriter(w, h), io.LimitReader(ctxReader{ctx, body}, size), *bp)
		switch {
		case err != nil:
			return 0, fmt.Errorf("copy body: %w", err)
		case n != size:
			return 0, fmt.Errorf("body is %d bytes, declared %d", n, size)
		}
		if m, _ := body.Read((*bp)[:1]); m > 0 {
			return 0, fmt.Errorf("body is longer than the %d bytes declared", size)
		}
		return h.Sum32(), nil
	})
	if err != nil {
		return temp{}, err
	}
	if crc32c != "" && crc32c != store.EncodeCRC32C(t.crc) {
		s.root.Remove(t.name)
		return temp{}, fmt.Errorf("CRC32C mismatch: the body's is %s, %s was sent", store.EncodeCRC32C(t.crc), crc32c)
	}
	return t.temp, nil
}

// filled is a temporary file and the CRC32C of what was written to it.
type filled struct {
	temp
	crc uint32
}

// fillTemp writes f (named name) with fill, sets its modification time,
// fsyncs and closes it; it removes the file on any error.
func (s *Store) fillTemp(ctx context.Context, f *os.File, name string, fill func(*os.File) (uint32, error)) (filled, error) {
	crc, err := fill(f)
	if err == nil {
		// A time set by the writer reads the same from every client of a
		// network filesystem, so the ETag Head reports is the one Put did.
		now := time.Now()
		err = s.root.Chtimes(name, now, now)
	}
	if err == nil {
		err = f.Sync()
	}
	var info fs.FileInfo
	if err == nil {
		info, err = f.Stat()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		s.root.Remove(name)
		return filled{}, fmt.Errorf("write temporary file: %w", err)
	}
	return filled{temp: temp{name: name, info: info}, crc: crc}, nil
}

// retryENOENT runs op, which links or renames a file to key, creating
// key's folders first when they are missing; a concurrent delete may
// remove an empty folder between the two, so it tries a few times.
func (s *Store) retryENOENT(key string, op func() error) error {
	var err error
	for range 5 {
		if err = op(); !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		if merr := s.mkdirParents(key); merr != nil {
			return merr
		}
	}
	return err
}

// create makes t the object key only if key does not exist, by link(2),
// which exactly one of any number of racing writers wins.
func (s *Store) create(t temp, key string) error {
	defer s.root.Remove(t.name)
	err := s.retryENOENT(key, func() error { return s.root.Link(t.name, key) })
	if errors.Is(err, fs.ErrExist) && !s.landed(t, key) {
		return store.ErrPreconditionFailed
	}
	if err != nil {
		return fmt.Errorf("link into place: %w", err)
	}
	return s.syncDir(parent(key))
}

// landed reports whether key is the file t, after a link or rename that
// failed: over NFS, a request retransmitted after its reply was lost
// fails (EEXIST, ENOENT) where the first one succeeded.
func (s *Store) landed(t temp, key string) bool {
	fi, err := s.root.Lstat(key)
	return err == nil && os.SameFile(fi, t.info)
}

// replace makes t the object key, replacing what is there; with ifMatch
// set, only while the object's ETag is ifMatch. The compare and the
// rename happen under key's lock, which every replacement and delete
// takes.
func (s *Store) replace(ctx context.Context, t temp, key, ifMatch string) error {
	unlock, err := s.lockKey(ctx, key)
	if err != nil {
		s.root.Remove(t.name)
		return err
	}
	if ifMatch != "" {
		cur, err := s.current(key)
		switch {
		case errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) || (err == nil && !cur.Mode().IsRegular()):
			err = fmt.Errorf("if-match %s: the object is gone: %w", ifMatch, store.ErrPreconditionFailed)
		case err == nil && etag(cur) != ifMatch:
			err = fmt.Errorf("if-match %s: the object is now %s: %w", ifMatch, etag(cur), store.ErrPreconditionFailed)
		}
		if err != nil {
			unlock()
			s.root.Remove(t.name)
			return err
		}
	}
	err = s.retryENOENT(key, func() error { return s.root.Rename(t.name, key) })
	unlock()
	if errors.Is(err, fs.ErrNotExist) && s.landed(t, key) {
		err = nil
	}
	if err != nil {
		s.root.Remove(t.name)
		return fmt.Errorf("rename into place: %w", err)
	}
	return s.syncDir(parent(key))
}

// current stats the object key through an open descriptor: on NFS an
// open revalidates the name and the file with the server (close-to-open),
// where a stat may answer from the client's caches what another host has
// since replaced.
func (s *Store) current(key string) (fs.FileInfo, error) {
	f, err := s.root.Open(key)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Stat()
}

// etag is an object's ETag: its inode, size and modification time. Every
// write makes a new file (a new inode while the old one still exists), so
// a replaced object never keeps its ETag.
func etag(fi fs.FileInfo) string {
	var ino uint64
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		ino = st.Ino
	}
	return fmt.Sprintf(`"%x-%x-%x"`, ino, fi.Size(), fi.ModTime().UnixNano())
}

func objectInfo(key string, fi fs.FileInfo) store.ObjectInfo {
	return store.ObjectInfo{Key: key, Size: fi.Size(), ETag: etag(fi), LastModified: fi.ModTime()}
}
