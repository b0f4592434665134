package peer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// spool keeps the ranges this node fetched from the bucket for its peers
// and itself, in one file (so that a million small objects cost one file
// descriptor), each range at an offset of its own.
type spool struct {
	f *os.File

	mu     sync.Mutex
	next   int64                  // the next free offset
	ranges map[rangeID]*heldRange // the ranges this node owns
}

type rangeID struct {
	key string
	i   int64
}

// heldRange is one owned range: done closes once it is held (n bytes at
// off in the spool) or its fetch failed (err).
type heldRange struct {
	done chan struct{}
	off  int64
	n    int64
	err  error
}

var errNotHeld = errors.New("range not held by this node")

func newSpool(dir string) (*spool, error) {
	f, err := os.CreateTemp(dir, ".ferry-peer-spool-*")
	if err != nil {
		return nil, fmt.Errorf("create the peer spool: %w", err)
	}
	// Unlinked at once: the spool goes with the process, however it ends.
	if err := os.Remove(f.Name()); err != nil {
		f.Close()
		return nil, fmt.Errorf("create the peer spool: %w", err)
	}
	return &spool{f: f, ranges: map[rangeID]*heldRange{}}, nil
}

// expect registers range i of key as one this node will hold, room for at
// most size bytes.
func (s *spool) expect(key string, i, size int64) *heldRange {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := &heldRange{done: make(chan struct{}), off: s.next}
	s.next += size
	s.ranges[rangeID{key, i}] = r
	return r
}

// fill writes body into r, at most max bytes, and marks it held; an error
// marks it failed.
func (s *spool) fill(r *heldRange, body io.Reader, max int64) error {
	n, err := io.Copy(io.NewOffsetWriter(s.f, r.off), io.LimitReader(body, max))
	r.n, r.err = n, err
	close(r.done)
	return err
}

// failed marks r failed without data.
func (s *spool) failed(r *heldRange, err error) {
	r.err = err
	close(r.done)
}

// wait returns range i of key once held, waiting at most timeout;
// errNotHeld when this node does not own it, or it failed or is late.
func (s *spool) wait(ctx context.Context, key string, i int64, timeout time.Duration) (*heldRange, error) {
	s.mu.Lock()
	r := s.ranges[rangeID{key, i}]
	s.mu.Unlock()
	if r == nil {
		return nil, errNotHeld
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-r.done:
	case <-t.C:
		return nil, fmt.Errorf("%w: still fetching it after %s", errNotHeld, timeout)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if r.err != nil {
		return nil, fmt.Errorf("%w: its fetch failed: %v", errNotHeld, r.err)
	}
	return r, nil
}

// section returns a reader of n bytes of r from byte skip.
func (s *spool) section(r *heldRange, skip, n int64) io.Reader {
	return io.NewSectionReader(s.f, r.off+skip, n)
}

func (s *spool) close() error { return s.f.Close() }
