// Package filestore is a store.Store over a folder of a local or parallel
// filesystem (ext4, XFS, NFS, Lustre, GPFS): a checkpoint location
// file:///lustre/ckpt holds the same keys, in the same layout, as
// s3://bucket would, one file per object.
//
// How it keeps the store contract on a filesystem:
//   - no partial results: every object is written whole to a temporary file
//     under the root's .ferry/tmp, fsynced, and only then linked or renamed
//     to its key, so a reader sees no object or the whole of it;
//   - create-only (PutOptions.IfNoneMatch): link(2) of the temporary file to
//     the key, which fails with EEXIST for every writer but one;
//   - If-Match and plain replacement: the current ETag compared and the
//     temporary file renamed over the key under an flock(2) on one of 256
//     lock files (by the key's hash), so a compare and its rename are one
//     step for every process that shares the folder;
//   - durability: the file is fsynced before it becomes visible, the folder
//     that holds the new name (and any folder created for it) before the call
//     returns;
//   - keys are paths below the root, opened through os.Root: a key that is
//     absolute, has an empty, "." or ".." segment, a NUL, or starts with the
//     reserved ".ferry/" is refused, and no symbolic link leads outside.
//
// Multipart uploads keep their parts under .ferry/uploads/<id>/, one file
// per part named by its number and CRC32C; completion concatenates them
// (copy_file_range where the filesystem offers it) into a temporary file
// that is committed like a Put. List walks the folders in key order and
// never shows what is under .ferry. The ETag of an object is its inode,
// size and modification time, which change with every write (each write is
// a new file); the ETag of a part is its CRC32C and size.
//
// docs/file-store.md says what NFS and Lustre guarantee for each step.
package filestore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ferrylabs/ferry/internal/store"
)

var _ store.Store = (*Store)(nil)

// The reserved folder under the root, and its parts. Keys never start with
// metaDir, and List never shows it.
const (
	metaDir    = ".ferry"
	tmpDir     = metaDir + "/tmp"
	uploadsDir = metaDir + "/uploads"
	locksDir   = metaDir + "/locks"
)

// MaxKeyLen is the longest key accepted, in bytes, as on S3 and R2.
const MaxKeyLen = 1024

// ErrInvalidKey is returned (wrapped) for a key that cannot name a file
// below the root.
var ErrInvalidKey = errors.New("invalid key for a file store")

// Options adjust a Store.
type Options struct {
	// OnRequest, when set, is called once per store call with the name of
	// the S3 operation it stands for (PutObject, GetObject, ...), so that
	// request counts read the same for every store.
	OnRequest func(op string)
}

// Store is a store.Store over the folder it was opened on. It is safe for
// concurrent use, by goroutines and by processes on any hosts that share
// the folder.
type Store struct {
	root      *os.Root
	dir       string
	onRequest func(op string)
	bufs      sync.Pool
}

// Open returns the store of the folder dir, which must exist: a missing
// folder is an error matching store.ErrNoBucket (as a missing bucket is),
// so that a parallel filesystem that is not mounted is never mistaken for
// an empty store.
func Open(dir string, opts Options) (*Store, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, &rootError{msg: "open file store",
				reason: fmt.Sprintf("folder %s does not exist: create it (mkdir -p %s) or check that its filesystem is mounted", dir, dir), cause: err}
		}
		return nil, fmt.Errorf("file store %s: open the folder: %w", dir, err)
	}
	return &Store{root: root, dir: dir, onRequest: opts.OnRequest,
		bufs: sync.Pool{New: func() any { b := make([]byte, copyBuf); return &b }}}, nil
}

// copyBuf is the size of the buffer a body is copied through.
const copyBuf = 1 << 20

// Close releases the folder.
func (s *Store) Close() error { return s.root.Close() }

// Dir returns the folder the store was opened on.
func (s *Store) Dir() string { return s.dir }

// rootError is a missing root folder: it matches store.ErrNoBucket and
// store.ErrNotExist, and says what to fix.
type rootError struct {
	msg, reason string
	cause       error
}

func (e *rootError) Error() string { return e.msg + ": " + e.reason }

// UserReason says what the user must fix; the CLI prints it.
func (e *rootError) UserReason() string { return e.reason }

func (e *rootError) Unwrap() error { return e.cause }

func (e *rootError) Is(target error) bool {
	return target == store.ErrNoBucket || target == store.ErrNotExist
}

func (s *Store) count(op string) {
	if s.onRequest != nil {
		s.onRequest(op)
	}
}

// checkKey refuses a key that does not name a file strictly below the
// root, outside the reserved folder.
func checkKey(key string) error {
	why := ""
	switch {
	case key == "":
		why = "empty"
	case len(key) > MaxKeyLen:
		why = fmt.Sprintf("longer than %d bytes", MaxKeyLen)
	case strings.IndexByte(key, 0) >= 0:
		why = "contains a NUL byte"
	case strings.HasPrefix(key, "/"):
		why = "absolute"
	case strings.HasSuffix(key, "/"):
		why = "ends with /"
	case key == metaDir || strings.HasPrefix(key, metaDir+"/"):
		why = "under the reserved folder " + metaDir
	}
	for seg := range strings.SplitSeq(key, "/") {
		if why == "" && (seg == "" || seg == "." || seg == "..") {
			why = fmt.Sprintf("has a %q path segment", seg)
		}
	}
	if why != "" {
		return fmt.Errorf("key %q: %s: %w", key, why, ErrInvalidKey)
	}
	return nil
}

// notExist maps a missing file (or a file where a folder should be) to
// store.ErrNotExist.
func notExist(err error, what string) error {
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return fmt.Errorf("%s: %w", what, store.ErrNotExist)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// randomName returns a fresh name for a temporary file or an upload.
func randomName() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}

// syncDir fsyncs the folder dir ("." for the root), so that the names
// created or removed in it survive a crash. Filesystems that cannot sync a
// folder (EINVAL) make their changes durable by other means.
func (s *Store) syncDir(dir string) error {
	f, err := s.root.Open(dir)
	if err != nil {
		return fmt.Errorf("open folder %s to sync: %w", dir, err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil && !errors.Is(err, syscall.EINVAL) {
		return fmt.Errorf("sync folder %s: %w", dir, err)
	}
	return nil
}

// parent returns the folder holding key ("." at the root).
func parent(key string) string { return path.Dir(key) }

// mkdirParents creates the folders above key that do not exist yet and
// syncs the folder each was created in.
func (s *Store) mkdirParents(key string) error {
	dir := parent(key)
	if dir == "." {
		return nil
	}
	for i := 0; i <= len(dir); i++ {
		if i < len(dir) && dir[i] != '/' {
			continue
		}
		sub := dir[:i]
		err := s.root.Mkdir(sub, 0o755)
		switch {
		case err == nil:
			if err := s.syncDir(parent(sub)); err != nil {
				return err
			}
		case errors.Is(err, fs.ErrExist):
		default:
			return fmt.Errorf("create folder %s: %w", sub, err)
		}
	}
	return nil
}

// mkdirMeta creates one of the reserved folders.
func (s *Store) mkdirMeta(dir string) error {
	if err := s.root.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	return nil
}

// removeEmptyParents removes the folders above key that a delete left
// empty, so that the key's name can later be an object again, as on S3.
// Best effort: a folder another writer has just filled stays.
func (s *Store) removeEmptyParents(key string) {
	for dir := parent(key); dir != "."; dir = parent(dir) {
		if err := s.root.Remove(dir); err != nil {
			return
		}
	}
}

// sleepCtx waits d or until ctx is done.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
