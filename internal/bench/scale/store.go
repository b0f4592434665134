package scale

import (
	"context"
	"io"
	"time"

	"github.com/ferrylabs/ferry/internal/s3store"
	"github.com/ferrylabs/ferry/internal/store"
)

// listPage is how many keys one LIST request returns (S3 and R2).
const listPage = 1000

// simStore is an object store with a fixed latency per request, as a
// client far from R2 sees it, counting requests (a LIST costs one request,
// and one latency, per 1,000 keys). It wraps the in-memory store; the
// hooks see successful writes and reads.
type simStore struct {
	inner   store.Store
	latency time.Duration
	counts  *s3store.Counters
	onPut   func(key string) // after a successful Put
	onGet   func(key string) // after a successful Get
}

func (s *simStore) wait(op string) {
	s.counts.Count(op)
	if s.latency > 0 {
		time.Sleep(s.latency)
	}
}

// Put implements store.Store.
func (s *simStore) Put(ctx context.Context, key string, body io.ReadSeeker, size int64, opts store.PutOptions) (store.ObjectInfo, error) {
	s.wait("PutObject")
	info, err := s.inner.Put(ctx, key, body, size, opts)
	if err == nil && s.onPut != nil {
		s.onPut(key)
	}
	return info, err
}

// Get implements store.Store.
func (s *simStore) Get(ctx context.Context, key string, off, length int64) (io.ReadCloser, error) {
	s.wait("GetObject")
	rc, err := s.inner.Get(ctx, key, off, length)
	if err == nil && s.onGet != nil {
		s.onGet(key)
	}
	return rc, err
}

// Head implements store.Store.
func (s *simStore) Head(ctx context.Context, key string) (store.ObjectInfo, error) {
	s.wait("HeadObject")
	return s.inner.Head(ctx, key)
}

// List implements store.Store: one request per page of 1,000 keys.
func (s *simStore) List(ctx context.Context, prefix, startAfter string, maxKeys int, fn func(store.ObjectInfo) error) error {
	s.wait("ListObjectsV2")
	n := 0
	return s.inner.List(ctx, prefix, startAfter, maxKeys, func(o store.ObjectInfo) error {
		if n > 0 && n%listPage == 0 {
			s.wait("ListObjectsV2")
		}
		n++
		return fn(o)
	})
}

// Delete implements store.Store.
func (s *simStore) Delete(ctx context.Context, key string) error {
	s.wait("DeleteObject")
	return s.inner.Delete(ctx, key)
}

// CreateMultipart implements store.Store.
func (s *simStore) CreateMultipart(ctx context.Context, key string) (string, error) {
	s.wait("CreateMultipartUpload")
	return s.inner.CreateMultipart(ctx, key)
}

// UploadPart implements store.Store.
func (s *simStore) UploadPart(ctx context.Context, key, uploadID string, n int32, body io.ReadSeeker, size int64, crc32c string) (store.Part, error) {
	s.wait("UploadPart")
	return s.inner.UploadPart(ctx, key, uploadID, n, body, size, crc32c)
}

// ListParts implements store.Store.
func (s *simStore) ListParts(ctx context.Context, key, uploadID string) ([]store.Part, error) {
	s.wait("ListParts")
	return s.inner.ListParts(ctx, key, uploadID)
}

// CompleteMultipart implements store.Store.
func (s *simStore) CompleteMultipart(ctx context.Context, key, uploadID string, parts []store.Part) (store.ObjectInfo, error) {
	s.wait("CompleteMultipartUpload")
	return s.inner.CompleteMultipart(ctx, key, uploadID, parts)
}

// AbortMultipart implements store.Store.
func (s *simStore) AbortMultipart(ctx context.Context, key, uploadID string) error {
	s.wait("AbortMultipartUpload")
	return s.inner.AbortMultipart(ctx, key, uploadID)
}

// ListUploads implements store.Store.
func (s *simStore) ListUploads(ctx context.Context, prefix string) ([]store.Upload, error) {
	s.wait("ListMultipartUploads")
	return s.inner.ListUploads(ctx, prefix)
}
