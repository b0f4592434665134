package store

import (
	"context"
	"io"
	"sync"
)

var _ Store = (*Faulty)(nil)

// Faulty wraps a Store and lets tests inject errors or side effects per
// call: Before is called with the operation name (the Store method name)
// and key before each call, and a non-nil error fails the call without
// reaching the wrapped store. It also counts calls per operation.
type Faulty struct {
	Inner  Store
	Before func(op, key string) error

	mu     sync.Mutex
	counts map[string]int
}

// Count returns how many times op was called (failed calls included).
func (f *Faulty) Count(op string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.counts[op]
}

func (f *Faulty) before(op, key string) error {
	f.mu.Lock()
	if f.counts == nil {
		f.counts = map[string]int{}
	}
	f.counts[op]++
	f.mu.Unlock()
	if f.Before != nil {
		return f.Before(op, key)
	}
	return nil
}

// Put implements Store.
func (f *Faulty) Put(ctx context.Context, key string, body io.ReadSeeker, size int64, opts PutOptions) (ObjectInfo, error) {
	if err := f.before("Put", key); err != nil {
		return ObjectInfo{}, err
	}
	return f.Inner.Put(ctx, key, body, size, opts)
}

// Get implements Store.
func (f *Faulty) Get(ctx context.Context, key string, off, length int64) (io.ReadCloser, error) {
	if err := f.before("Get", key); err != nil {
		return nil, err
	}
	return f.Inner.Get(ctx, key, off, length)
}

// Head implements Store.
func (f *Faulty) Head(ctx context.Context, key string) (ObjectInfo, error) {
	if err := f.before("Head", key); err != nil {
		return ObjectInfo{}, err
	}
	return f.Inner.Head(ctx, key)
}

// List implements Store.
func (f *Faulty) List(ctx context.Context, prefix, startAfter string, maxKeys int, fn func(ObjectInfo) error) error {
	if err := f.before("List", prefix); err != nil {
		return err
	}
	return f.Inner.List(ctx, prefix, startAfter, maxKeys, fn)
}

// Delete implements Store.
func (f *Faulty) Delete(ctx context.Context, key string) error {
	if err := f.before("Delete", key); err != nil {
		return err
	}
	return f.Inner.Delete(ctx, key)
}

// CreateMultipart implements Store.
func (f *Faulty) CreateMultipart(ctx context.Context, key string) (string, error) {
	if err := f.before("CreateMultipart", key); err != nil {
		return "", err
	}
	return f.Inner.CreateMultipart(ctx, key)
}

// UploadPart implements Store.
func (f *Faulty) UploadPart(ctx context.Context, key, uploadID string, n int32, body io.ReadSeeker, size int64, crc32c string) (Part, error) {
	if err := f.before("UploadPart", key); err != nil {
		return Part{}, err
	}
	return f.Inner.UploadPart(ctx, key, uploadID, n, body, size, crc32c)
}

// ListParts implements Store.
func (f *Faulty) ListParts(ctx context.Context, key, uploadID string) ([]Part, error) {
	if err := f.before("ListParts", key); err != nil {
		return nil, err
	}
	return f.Inner.ListParts(ctx, key, uploadID)
}

// CompleteMultipart implements Store.
func (f *Faulty) CompleteMultipart(ctx context.Context, key, uploadID string, parts []Part) (ObjectInfo, error) {
	if err := f.before("CompleteMultipart", key); err != nil {
		return ObjectInfo{}, err
	}
	return f.Inner.CompleteMultipart(ctx, key, uploadID, parts)
}

// AbortMultipart implements Store.
func (f *Faulty) AbortMultipart(ctx context.Context, key, uploadID string) error {
	if err := f.before("AbortMultipart", key); err != nil {
		return err
	}
	return f.Inner.AbortMultipart(ctx, key, uploadID)
}

// ListUploads implements Store.
func (f *Faulty) ListUploads(ctx context.Context, prefix string) ([]Upload, error) {
	if err := f.before("ListUploads", prefix); err != nil {
		return nil, err
	}
	return f.Inner.ListUploads(ctx, prefix)
}
