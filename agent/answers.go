package agent

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"github.com/ferrylabs/ferry/internal/store"
)

// storeAnswers records since when the store's requests have gone
// unanswered (zero while it answers) and the last error, for Ready. An
// idle agent asks nothing and so stays ready at no cost; a store that
// stops answering is seen at the agent's next request (an upload, a
// retry, a look for another node's commit).
type storeAnswers struct {
	mu           sync.Mutex
	failingSince time.Time
	lastErr      string
}

func (s *storeAnswers) record(err error) {
	if !answered(err) && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		return // given up by the agent, not refused by the store
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if answered(err) {
		s.failingSince, s.lastErr = time.Time{}, ""
		return
	}
	if s.failingSince.IsZero() {
		s.failingSince = time.Now()
	}
	s.lastErr = err.Error()
}

// failing returns since when requests have gone unanswered (zero if they
// have not) and the last error.
func (s *storeAnswers) failing() (since time.Time, lastErr string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failingSince, s.lastErr
}

// answered reports whether err (nil included) is the store's answer to a
// request rather than a failure to get one: an absent object or a refused
// conditional write is an answer.
func answered(err error) bool {
	return err == nil || errors.Is(err, store.ErrNotExist) || errors.Is(err, store.ErrPreconditionFailed)
}

// answerStore is a store.Store that records the store's answers.
type answerStore struct {
	store.Store
	answers *storeAnswers
}

var _ store.Store = answerStore{}

// Put implements store.Store.
func (s answerStore) Put(ctx context.Context, key string, body io.ReadSeeker, size int64, opts store.PutOptions) (store.ObjectInfo, error) {
	info, err := s.Store.Put(ctx, key, body, size, opts)
	s.answers.record(err)
	return info, err
}

// Get implements store.Store.
func (s answerStore) Get(ctx context.Context, key string, off, length int64) (io.ReadCloser, error) {
	rc, err := s.Store.Get(ctx, key, off, length)
	s.answers.record(err)
	return rc, err
}

// Head implements store.Store.
func (s answerStore) Head(ctx context.Context, key string) (store.ObjectInfo, error) {
	info, err := s.Store.Head(ctx, key)
	s.answers.record(err)
	return info, err
}

// List implements store.Store.
func (s answerStore) List(ctx context.Context, prefix, startAfter string, maxKeys int, fn func(store.ObjectInfo) error) error {
	err := s.Store.List(ctx, prefix, startAfter, maxKeys, fn)
	s.answers.record(err)
	return err
}

// Delete implements store.Store.
func (s answerStore) Delete(ctx context.Context, key string) error {
	err := s.Store.Delete(ctx, key)
	s.answers.record(err)
	return err
}

// CreateMultipart implements store.Store.
func (s answerStore) CreateMultipart(ctx context.Context, key string) (string, error) {
	id, err := s.Store.CreateMultipart(ctx, key)
	s.answers.record(err)
	return id, err
}

// UploadPart implements store.Store.
func (s answerStore) UploadPart(ctx context.Context, key, uploadID string, n int32, body io.ReadSeeker, size int64, crc32c string) (store.Part, error) {
	p, err := s.Store.UploadPart(ctx, key, uploadID, n, body, size, crc32c)
	s.answers.record(err)
	return p, err
}

// ListParts implements store.Store.
func (s answerStore) ListParts(ctx context.Context, key, uploadID string) ([]store.Part, error) {
	parts, err := s.Store.ListParts(ctx, key, uploadID)
	s.answers.record(err)
	return parts, err
}

// CompleteMultipart implements store.Store.
func (s answerStore) CompleteMultipart(ctx context.Context, key, uploadID string, parts []store.Part) (store.ObjectInfo, error) {
	info, err := s.Store.CompleteMultipart(ctx, key, uploadID, parts)
	s.answers.record(err)
	return info, err
}

// AbortMultipart implements store.Store.
func (s answerStore) AbortMultipart(ctx context.Context, key, uploadID string) error {
	err := s.Store.AbortMultipart(ctx, key, uploadID)
	s.answers.record(err)
	return err
}

// ListUploads implements store.Store.
func (s answerStore) ListUploads(ctx context.Context, prefix string) ([]store.Upload, error) {
	ups, err := s.Store.ListUploads(ctx, prefix)
	s.answers.record(err)
	return ups, err
}
