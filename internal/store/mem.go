package store

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash/crc32"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

var _ Store = (*MemStore)(nil)

// MemStore is an in-memory Store for unit tests of logic. It enforces the
// rules R2 enforces on multipart uploads (equal non-final part sizes, a final
// part no larger than the others, non-final parts of at least MinPartSize)
// and verifies CRC32C checksums, so logic that passes here does not rely on
// a lenient server.
type MemStore struct {
	mu      sync.Mutex
	objects map[string]memObject
	uploads map[string]*memUpload
	nextID  int
}

type memObject struct {
	data     []byte
	etag     string
	modified time.Time
}

type memUpload struct {
	key       string
	parts     map[int32]memPart
	initiated time.Time
}

type memPart struct {
	data []byte
	etag string
	crc  string
}

// NewMemStore returns an empty in-memory store.
func NewMemStore() *MemStore {
	return &MemStore{objects: map[string]memObject{}, uploads: map[string]*memUpload{}}
}

// CRC32C returns the S3 encoding (base64 of the big-endian value) of the
// CRC32C of b.
func CRC32C(b []byte) string {
	return EncodeCRC32C(crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)))
}

// EncodeCRC32C returns the S3 header encoding of a CRC32C value.
func EncodeCRC32C(sum uint32) string {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], sum)
	return base64.StdEncoding.EncodeToString(b[:])
}

func md5hex(b []byte) string {
	s := md5.Sum(b)
	return hex.EncodeToString(s[:])
}

func readBody(body io.ReadSeeker, size int64) ([]byte, error) {
	if _, err := body.Seek(0, io.SeekStart); err != nil {
		return nil, fmt.Errorf("rewind body: %w", err)
	}
	data, err := io.ReadAll(io.LimitReader(body, size+1))
	if err != nil {
		return nil, fmt.Errorf("read body: %w", err)
	}
	if int64(len(data)) != size {
		return nil, fmt.Errorf("body is %d bytes, declared %d", len(data), size)
	}
	return data, nil
}

// Put implements Store.
func (m *MemStore) Put(ctx context.Context, key string, body io.ReadSeeker, size int64, opts PutOptions) (ObjectInfo, error) {
	if err := ctx.Err(); err != nil {
		return ObjectInfo{}, err
	}
	data, err := readBody(body, size)
	if err != nil {
		return ObjectInfo{}, fmt.Errorf("put %s: %w", key, err)
	}
	if opts.CRC32C != "" && opts.CRC32C != CRC32C(data) {
		return ObjectInfo{}, fmt.Errorf("put %s: CRC32C mismatch", key)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.objects[key]; ok && opts.IfNoneMatch {
		return ObjectInfo{}, fmt.Errorf("put %s: %w", key, ErrPreconditionFailed)
	}
	if cur, ok := m.objects[key]; opts.IfMatch != "" && (!ok || cur.etag != opts.IfMatch) {
		return ObjectInfo{}, fmt.Errorf("put %s: if-match %s: %w", key, opts.IfMatch, ErrPreconditionFailed)
	}
	o := memObject{data: data, etag: `"` + md5hex(data) + `"`, modified: time.Now()}
	m.objects[key] = o
	return ObjectInfo{Key: key, Size: size, ETag: o.etag, LastModified: o.modified}, nil
}

// Get implements Store.
func (m *MemStore) Get(ctx context.Context, key string, off, length int64) (io.ReadCloser, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	o, ok := m.objects[key]
	m.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("get %s: %w", key, ErrNotExist)
	}
	if off < 0 || off > int64(len(o.data)) {
		return nil, fmt.Errorf("get %s: range start %d outside object of %d bytes", key, off, len(o.data))
	}
	end := int64(len(o.data))
	if length >= 0 && off+length < end {
		end = off + length
	}
	return io.NopCloser(bytes.NewReader(o.data[off:end])), nil
}

// Head implements Store.
func (m *MemStore) Head(ctx context.Context, key string) (ObjectInfo, error) {
	if err := ctx.Err(); err != nil {
		return ObjectInfo{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	o, ok := m.objects[key]
	if !ok {
		return ObjectInfo{}, fmt.Errorf("head %s: %w", key, ErrNotExist)
	}
	return ObjectInfo{Key: key, Size: int64(len(o.data)), ETag: o.etag, LastModified: o.modified}, nil
}

// List implements Store.
func (m *MemStore) List(ctx context.Context, prefix, startAfter string, maxKeys int, fn func(ObjectInfo) error) error {
	m.mu.Lock()
	var infos []ObjectInfo
	for k, o := range m.objects {
		if strings.HasPrefix(k, prefix) && k > startAfter {
			infos = append(infos, ObjectInfo{Key: k, Size: int64(len(o.data)), ETag: o.etag, LastModified: o.modified})
		}
	}
	m.mu.Unlock()
	sort.Slice(infos, func(i, j int) bool { return infos[i].Key < infos[j].Key })
	for i, info := range infos {
		if maxKeys > 0 && i >= maxKeys {
			break
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := fn(info); err != nil {
			if err == ErrStopList {
				return nil
			}
			return err
		}
	}
	return nil
}

// Delete implements Store.
func (m *MemStore) Delete(ctx context.Context, key string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.objects, key)
	return nil
}

// CreateMultipart implements Store.
func (m *MemStore) CreateMultipart(ctx context.Context, key string) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.nextID++
	id := fmt.Sprintf("upload-%d", m.nextID)
	m.uploads[id] = &memUpload{key: key, parts: map[int32]memPart{}, initiated: time.Now()}
	return id, nil
}

func (m *MemStore) upload(key, uploadID string) (*memUpload, error) {
	u, ok := m.uploads[uploadID]
	if !ok || u.key != key {
		return nil, fmt.Errorf("upload %s of %s: %w", uploadID, key, ErrNotExist)
	}
	return u, nil
}

// UploadPart implements Store.
func (m *MemStore) UploadPart(ctx context.Context, key, uploadID string, n int32, body io.ReadSeeker, size int64, crc32c string) (Part, error) {
	if err := ctx.Err(); err != nil {
		return Part{}, err
	}
	if n < 1 || n > MaxParts {
		return Part{}, fmt.Errorf("upload part %d of %s: part number outside 1..%d", n, key, MaxParts)
	}
	data, err := readBody(body, size)
	if err != nil {
		return Part{}, fmt.Errorf("upload part %d of %s: %w", n, key, err)
	}
	if crc32c == "" || crc32c != CRC32C(data) {
		return Part{}, fmt.Errorf("upload part %d of %s: CRC32C mismatch", n, key)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	u, err := m.upload(key, uploadID)
	if err != nil {
		return Part{}, err
	}
	p := memPart{data: data, etag: `"` + md5hex(data) + `"`, crc: crc32c}
	u.parts[n] = p
	return Part{Number: n, Size: size, ETag: p.etag, CRC32C: crc32c}, nil
}

// ListParts implements Store.
func (m *MemStore) ListParts(ctx context.Context, key, uploadID string) ([]Part, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	u, err := m.upload(key, uploadID)
	if err != nil {
		return nil, err
	}
	parts := make([]Part, 0, len(u.parts))
	for n, p := range u.parts {
		parts = append(parts, Part{Number: n, Size: int64(len(p.data)), ETag: p.etag, CRC32C: p.crc})
	}
	sort.Slice(parts, func(i, j int) bool { return parts[i].Number < parts[j].Number })
	return parts, nil
}

// CompleteMultipart implements Store.
func (m *MemStore) CompleteMultipart(ctx context.Context, key, uploadID string, parts []Part) (ObjectInfo, error) {
	if err := ctx.Err(); err != nil {
		return ObjectInfo{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	u, err := m.upload(key, uploadID)
	if err != nil {
		return ObjectInfo{}, err
	}
	if len(parts) == 0 {
		return ObjectInfo{}, fmt.Errorf("complete %s: no parts", key)
	}
	var data []byte
	var first int
	for i, p := range parts {
		sp, ok := u.parts[p.Number]
		if !ok || sp.etag != p.ETag || (p.CRC32C != "" && p.CRC32C != sp.crc) {
			return ObjectInfo{}, fmt.Errorf("complete %s: part %d does not match the uploaded part", key, p.Number)
		}
		if i > 0 && p.Number <= parts[i-1].Number {
			return ObjectInfo{}, fmt.Errorf("complete %s: parts not in ascending order", key)
		}
		size := len(sp.data)
		last := i == len(parts)-1
		switch {
		case i == 0:
			first = size
		case !last && size != first:
			return ObjectInfo{}, fmt.Errorf("complete %s: all non-trailing parts must have the same length", key)
		case last && size > first:
			return ObjectInfo{}, fmt.Errorf("complete %s: final part larger than the others", key)
		}
		if !last && size < MinPartSize {
			return ObjectInfo{}, fmt.Errorf("complete %s: part %d smaller than %d bytes", key, p.Number, MinPartSize)
		}
		data = append(data, sp.data...)
	}
	delete(m.uploads, uploadID)
	o := memObject{data: data, etag: fmt.Sprintf(`"%s-%d"`, md5hex(data), len(parts)), modified: time.Now()}
	m.objects[key] = o
	return ObjectInfo{Key: key, Size: int64(len(data)), ETag: o.etag, LastModified: o.modified}, nil
}

// AbortMultipart implements Store.
func (m *MemStore) AbortMultipart(ctx context.Context, key, uploadID string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, err := m.upload(key, uploadID); err != nil {
		return err
	}
	delete(m.uploads, uploadID)
	return nil
}

// ListUploads implements Store.
func (m *MemStore) ListUploads(ctx context.Context, prefix string) ([]Upload, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var ups []Upload
	for id, u := range m.uploads {
		if strings.HasPrefix(u.key, prefix) {
			ups = append(ups, Upload{Key: u.key, UploadID: id, Initiated: u.initiated})
		}
	}
	sort.Slice(ups, func(i, j int) bool { return ups[i].Key+ups[i].UploadID < ups[j].Key+ups[j].UploadID })
	return ups, nil
}

// Objects returns the keys of all stored objects, sorted. For tests.
func (m *MemStore) Objects() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Sorted(maps.Keys(m.objects))
}
