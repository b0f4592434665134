package filestore

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// lockStripes is how many lock files the keys share. A writer holds one
// only for a compare and a rename, so a few hundred are plenty, and their
// number stays bounded however many keys the store holds.
const lockStripes = 256

// lockWaitMax is the longest pause between two tries of a held lock.
const lockWaitMax = 20 * time.Millisecond

// lockKey takes the exclusive lock every replacement and delete of key
// holds, and returns its release.
func (s *Store) lockKey(ctx context.Context, key string) (func(), error) {
	h := fnv.New32a()
	h.Write([]byte(key))
	name := fmt.Sprintf("%s/%02x", locksDir, h.Sum32()%lockStripes)
	f, err := s.root.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
	if errors.Is(err, fs.ErrNotExist) {
		if err := s.mkdirMeta(locksDir); err != nil {
			return nil, err
		}
		f, err = s.root.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
	}
	if err != nil {
		return nil, fmt.Errorf("open lock file %s: %w", name, err)
	}
	if err := s.flock(ctx, f, unix.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil
}

// flock takes an flock(2) lock of kind how on f, polling so that ctx can
// end the wait (a blocking flock cannot be interrupted). Closing f
// releases it.
func (s *Store) flock(ctx context.Context, f *os.File, how int) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return fmt.Errorf("lock %s: %w", f.Name(), err)
	}
	wait := 100 * time.Microsecond
	for {
		var lerr error
		if err := rc.Control(func(fd uintptr) {
			lerr = unix.Flock(int(fd), how|unix.LOCK_NB)
		}); err != nil {
			return fmt.Errorf("lock %s: %w", f.Name(), err)
		}
		switch {
		case lerr == nil:
			return nil
		case errors.Is(lerr, syscall.EWOULDBLOCK), errors.Is(lerr, syscall.EINTR):
		case errors.Is(lerr, syscall.ENOSYS), errors.Is(lerr, syscall.EOPNOTSUPP), errors.Is(lerr, syscall.ENOLCK):
			return fmt.Errorf("lock %s: %w (the filesystem of %s offers no flock: mount Lustre with -o flock, NFS with locking, i.e. without -o nolock)",
				f.Name(), lerr, s.dir)
		default:
			return fmt.Errorf("lock %s: %w", f.Name(), lerr)
		}
		if err := sleepCtx(ctx, wait); err != nil {
			return fmt.Errorf("lock %s: %w", f.Name(), err)
		}
		wait = min(2*wait, lockWaitMax)
	}
}
