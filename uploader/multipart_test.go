package uploader

import (
	"context"
	"errors"
	"io"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/internal/store"
)

// partGiveUp bounds how long failingPartStore waits for anything, so that
// a test of cancellation fails instead of hanging when none comes.
const partGiveUp = 30 * time.Second

var (
	errPartOne      = errors.New("part 1 refused")
	errNotCancelled = errors.New("part not cancelled after part 1 failed")
)

// failingPartStore fails part 1 of every upload once another part is in
// flight, and holds every other part until its context is cancelled,
// counting those cancelled and those that gave up waiting.
type failingPartStore struct {
	store.Store
	inFlight  chan struct{}
	cancelled atomic.Int32
	gaveUp    atomic.Int32
}

func (s *failingPartStore) UploadPart(ctx context.Context, key, uploadID string, n int32, body io.ReadSeeker, size int64, crc32c string) (store.Part, error) {
	if n == 1 {
		select {
		case <-s.inFlight:
		case <-time.After(partGiveUp):
		}
		return store.Part{}, errPartOne
	}
	select {
	case s.inFlight <- struct{}{}:
	default:
	}
	select {
	case <-ctx.Done():
		s.cancelled.Add(1)
		return store.Part{}, ctx.Err()
	case <-time.After(partGiveUp):
		s.gaveUp.Add(1)
		return store.Part{}, errNotCancelled
	}
}

// A part that fails cancels the file's other parts at once: the push
// returns that part's error without waiting for its siblings to end on
// their own, and every sibling in flight sees its context cancelled.
func TestFailedPartCancelsTheFilesOtherParts(t *testing.T) {
	dir := t.TempDir()
	writeRandom(t, filepath.Join(dir, "rank0.pt"), 6*testPart+99, 1)
	st := &failingPartStore{Store: store.NewMemStore(), inFlight: make(chan struct{}, 1)}
	start := time.Now()
	_, err := push(t, st, dir, 7, t.TempDir(), func(c *pushCase) { c.Upload.Concurrency = 4 })
	elapsed := time.Since(start)
	if !errors.Is(err, errPartOne) {
		t.Fatalf("push: got %v, want part 1's error", err)
	}
	if elapsed >= partGiveUp {
		t.Errorf("push returned after %v: the failed part did not cancel its siblings", elapsed)
	}
	if n := st.gaveUp.Load(); n != 0 {
		t.Errorf("%d parts waited %v without being cancelled", n, partGiveUp)
	}
	if st.cancelled.Load() == 0 {
		t.Error("no other part was in flight and cancelled when part 1 failed")
	}
}
