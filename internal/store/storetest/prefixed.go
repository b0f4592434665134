package storetest

import (
	"context"
	"io"
	"strings"

	"github.com/ferrylabs/ferry/internal/store"
)

// Prefixed returns a view of st in which every key lives under prefix
// (which should end in "/"): the suite's "fresh bucket" within a bucket
// shared with other data, for runs against a real endpoint where a test
// may not create buckets. Listings see only keys under prefix, returned
// without it.
func Prefixed(st store.Store, prefix string) store.Store { return &prefixed{st: st, p: prefix} }

var _ store.Store = (*prefixed)(nil)

type prefixed struct {
	st store.Store
	p  string
}

func (s *prefixed) Put(ctx context.Context, key string, body io.ReadSeeker, size int64, opts store.PutOptions) (store.ObjectInfo, error) {
	info, err := s.st.Put(ctx, s.p+key, body, size, opts)
	info.Key = strings.TrimPrefix(info.Key, s.p)
	return info, err
}

func (s *prefixed) Get(ctx context.Context, key string, off, length int64) (io.ReadCloser, error) {
	return s.st.Get(ctx, s.p+key, off, length)
}

func (s *prefixed) Head(ctx context.Context, key string) (store.ObjectInfo, error) {
	info, err := s.st.Head(ctx, s.p+key)
	info.Key = strings.TrimPrefix(info.Key, s.p)
	return info, err
}

func (s *prefixed) List(ctx context.Context, prefix, startAfter string, maxKeys int, fn func(store.ObjectInfo) error) error {
	if startAfter != "" {
		startAfter = s.p + startAfter
	}
	return s.st.List(ctx, s.p+prefix, startAfter, maxKeys, func(o store.ObjectInfo) error {
		o.Key = strings.TrimPrefix(o.Key, s.p)
		return fn(o)
	})
}

func (s *prefixed) Delete(ctx context.Context, key string) error { return s.st.Delete(ctx, s.p+key) }

func (s *prefixed) CreateMultipart(ctx context.Context, key string) (string, error) {
	return s.st.CreateMultipart(ctx, s.p+key)
}

func (s *prefixed) UploadPart(ctx context.Context, key, uploadID string, n int32, body io.ReadSeeker, size int64, crc32c string) (store.Part, error) {
	return s.st.UploadPart(ctx, s.p+key, uploadID, n, body, size, crc32c)
}

func (s *prefixed) ListParts(ctx context.Context, key, uploadID string) ([]store.Part, error) {
	return s.st.ListParts(ctx, s.p+key, uploadID)
}

func (s *prefixed) CompleteMultipart(ctx context.Context, key, uploadID string, parts []store.Part) (store.ObjectInfo, error) {
	info, err := s.st.CompleteMultipart(ctx, s.p+key, uploadID, parts)
	info.Key = strings.TrimPrefix(info.Key, s.p)
	return info, err
}

func (s *prefixed) AbortMultipart(ctx context.Context, key, uploadID string) error {
	return s.st.AbortMultipart(ctx, s.p+key, uploadID)
}

func (s *prefixed) ListUploads(ctx context.Context, prefix string) ([]store.Upload, error) {
	ups, err := s.st.ListUploads(ctx, s.p+prefix)
	for i := range ups {
		ups[i].Key = strings.TrimPrefix(ups[i].Key, s.p)
	}
	return ups, err
}

// Clear deletes every object and aborts every upload under prefix of st:
// what a run against a real endpoint leaves. It returns the first error.
func Clear(ctx context.Context, st store.Store, prefix string) error {
	var keys []string
	if err := st.List(ctx, prefix, "", 0, func(o store.ObjectInfo) error {
		keys = append(keys, o.Key)
		return nil
	}); err != nil {
		return err
	}
	for _, k := range keys {
		if err := st.Delete(ctx, k); err != nil {
			return err
		}
	}
	ups, err := st.ListUploads(ctx, prefix)
	if err != nil {
		return err
	}
	for _, u := range ups {
		if err := st.AbortMultipart(ctx, u.Key, u.UploadID); err != nil {
			return err
		}
	}
	return nil
}
