// Package store defines the small object-store interface ferry needs, the
// errors every implementation maps to, and an in-memory implementation for
// unit tests of logic. The S3 implementation lives in internal/s3store.
//
// Guarantees ferry relies on from a backend (R2 and AWS S3 give all of them):
//   - read-after-write: a completed Put or CompleteMultipart is visible to the
//     next Get, Head and List from any client;
//   - no partial results: an object is either absent or complete;
//   - conditional create: Put with IfNoneMatch succeeds for exactly one of any
//     number of racing writers, the others get ErrPreconditionFailed.
package store

import (
	"context"
	"errors"
	"io"
	"time"
)

// ErrNotExist is returned (wrapped) when an object, upload or bucket named in
// a call does not exist. Callers test with errors.Is.
var ErrNotExist = errors.New("object does not exist")

// ErrNoBucket is returned (wrapped) when the bucket itself does not exist.
// Such errors also match ErrNotExist, but callers that would read "absent
// object" as "nothing committed yet" (a push checking for a manifest) must
// stop instead: nothing can be written to a missing bucket.
var ErrNoBucket = errors.New("bucket does not exist")

// ErrPreconditionFailed is returned (wrapped) when a conditional write lost:
// Put with IfNoneMatch found the key already present.
var ErrPreconditionFailed = errors.New("precondition failed: object already exists")

// The object-store limits ferry plans against, in one place, with why:
//
//   - MinPartSize: every multipart part but the last must be at least
//     5 MiB (S3 and R2 refuse the CompleteMultipartUpload otherwise).
//   - MaxPartSize: a part is at most 5 GiB (S3 and R2).
//   - MaxParts: an upload has at most 10,000 parts (S3 and R2), so the
//     uploader raises the part size of files over MaxParts x its part size.
//   - MaxSinglePut: one PUT carries at most 5 GiB - 5 MiB on R2 (S3 allows
//     5 GiB); bigger objects are multipart.
//   - Equal parts: R2 also requires every part but the last to have the
//     same size (S3 does not), which is why the uploader cuts every file
//     into parts of one fixed size and never resizes a part on retry.
//
// internal/s3proxy models what R2 refuses on its own, from R2's
// documentation, so that the proxy checks ferry rather than ferry's belief.
// The manifest format states the first four again (package manifest checks
// a file's part_size against them without depending on this package);
// internal/remote does not compile if the two ever differ.
const (
	MinPartSize  = 5 << 20
	MaxPartSize  = 5 << 30
	MaxParts     = 10000
	MaxSinglePut = 5<<30 - 5<<20
)

// ObjectInfo describes a stored object.
type ObjectInfo struct {
	Key          string
	Size         int64
	ETag         string
	LastModified time.Time
}

// Part describes one uploaded part of a multipart upload. CRC32C is the
// base64 encoding of the big-endian CRC32C of the part's bytes, as S3 uses it.
type Part struct {
	Number int32
	Size   int64
	ETag   string
	CRC32C string
}

// Upload describes an unfinished multipart upload.
type Upload struct {
	Key       string
	UploadID  string
	Initiated time.Time
}

// PutOptions adjust a single-request write.
type PutOptions struct {
	// IfNoneMatch makes the write create-only (If-None-Match: *): it fails
	// with ErrPreconditionFailed when the key already exists.
	IfNoneMatch bool
	// IfMatch, when set, makes the write a replacement of exactly the
	// object whose ETag (as Head reports it) it holds (If-Match): it fails
	// with ErrPreconditionFailed when the object changed since, and with
	// ErrPreconditionFailed or ErrNotExist when it is gone.
	IfMatch string
	// CRC32C, when set, is sent for the server to verify the body against.
	CRC32C string
	// ContentType is stored with the object when set.
	ContentType string
}

// Store is the set of object-store calls ferry makes. Keys are full object
// keys within one bucket. Bodies passed in are io.ReadSeekers so that a
// request can be retried without ferry buffering it.
type Store interface {
	// Put writes a whole object in one request.
	Put(ctx context.Context, key string, body io.ReadSeeker, size int64, opts PutOptions) (ObjectInfo, error)
	// Get returns a reader over length bytes of the object from offset off;
	// length < 0 reads to the end. ErrNotExist if the object is absent.
	Get(ctx context.Context, key string, off, length int64) (io.ReadCloser, error)
	// Head returns the object's info, or ErrNotExist.
	Head(ctx context.Context, key string) (ObjectInfo, error)
	// List calls fn for each object whose key starts with prefix, in
	// ascending key order, starting after startAfter (if not empty). It
	// stops early, returning nil, when fn returns ErrStopList; other errors
	// from fn are returned. maxKeys > 0 limits the number of objects listed
	// in total, which lets callers ask for the first key in one request.
	List(ctx context.Context, prefix, startAfter string, maxKeys int, fn func(ObjectInfo) error) error
	// Delete removes an object. Deleting an absent object is not an error.
	Delete(ctx context.Context, key string) error

	// CreateMultipart starts a multipart upload whose parts carry CRC32C
	// checksums and returns its upload ID.
	CreateMultipart(ctx context.Context, key string) (string, error)
	// UploadPart uploads part number n (1-based) of an upload. crc32c is
	// required and verified by the server.
	UploadPart(ctx context.Context, key, uploadID string, n int32, body io.ReadSeeker, size int64, crc32c string) (Part, error)
	// ListParts returns the parts the server holds for an upload, in part
	// number order. ErrNotExist if the upload is unknown (completed,
	// aborted or expired).
	ListParts(ctx context.Context, key, uploadID string) ([]Part, error)
	// CompleteMultipart assembles the given parts into the object.
	CompleteMultipart(ctx context.Context, key, uploadID string, parts []Part) (ObjectInfo, error)
	// AbortMultipart discards an upload and its parts. Aborting an unknown
	// upload returns ErrNotExist.
	AbortMultipart(ctx context.Context, key, uploadID string) error
	// ListUploads returns unfinished multipart uploads under prefix.
	ListUploads(ctx context.Context, prefix string) ([]Upload, error)
}

// ErrStopList is returned by a List callback to end the listing early.
var ErrStopList = errors.New("stop listing")
