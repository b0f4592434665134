package s3store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/ferrylabs/ferry/internal/store"
)

var _ store.Store = (*Store)(nil)

// unsignedPayload signs a request without hashing its body
// (x-amz-content-sha256: UNSIGNED-PAYLOAD). Over plain HTTP the SDK would
// otherwise read every body once for SHA-256 before sending it; the CRC32C
// header the server verifies carries integrity instead.
var unsignedPayload = s3.WithAPIOptions(v4.SwapComputePayloadSHA256ForUnsignedPayloadMiddleware)

// maxListKeys is the largest page S3 returns for one list request.
const maxListKeys = 1000

// rewind checks that body holds exactly size bytes and seeks it to its
// start. A wrong size would otherwise fail only after every retry.
func rewind(body io.ReadSeeker, size int64) error {
	n, err := body.Seek(0, io.SeekEnd)
	if err != nil {
		return fmt.Errorf("seek body: %w", err)
	}
	if n != size {
		return fmt.Errorf("body is %d bytes, declared %d", n, size)
	}
	if _, err := body.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("seek body: %w", err)
	}
	return nil
}

// Put implements store.Store.
func (s *Store) Put(ctx context.Context, key string, body io.ReadSeeker, size int64, opts store.PutOptions) (store.ObjectInfo, error) {
	what := "put " + key
	if err := rewind(body, size); err != nil {
		return store.ObjectInfo{}, fmt.Errorf("%s: %w", what, err)
	}
	in := &s3.PutObjectInput{
		Bucket:        aws.String(s.bucket),
		Key:           aws.String(key),
		Body:          body,
		ContentLength: aws.Int64(size),
	}
	if opts.CRC32C != "" {
		in.ChecksumCRC32C = aws.String(opts.CRC32C)
	}
	if opts.IfNoneMatch {
		in.IfNoneMatch = aws.String("*")
	}
	if opts.IfMatch != "" {
		in.IfMatch = aws.String(opts.IfMatch)
	}
	if opts.ContentType != "" {
		in.ContentType = aws.String(opts.ContentType)
	}
	conditional := opts.IfNoneMatch || opts.IfMatch != ""
	var out *s3.PutObjectOutput
	var err error
	if conditional {
		var lost bool
		if out, lost, err = s.putConditional(ctx, in, body, size, opts); lost {
			return store.ObjectInfo{}, &storeError{
				msg:     what + ": " + store.ErrPreconditionFailed.Error() + " (found after 429 Too Many Requests)",
				targets: []error{store.ErrPreconditionFailed},
				cause:   err,
			}
		}
	} else {
		out, err = s.client.PutObject(ctx, in, unsignedPayload)
	}
	if err != nil {
		return store.ObjectInfo{}, s.mapErr(err, what, conditional)
	}
	return store.ObjectInfo{Key: key, Size: size, ETag: aws.ToString(out.ETag)}, nil
}

// Get implements store.Store. A range that starts at the end of the object
// yields an empty reader, as it does from store.MemStore.
func (s *Store) Get(ctx context.Context, key string, off, length int64) (io.ReadCloser, error) {
	what := "get " + key
	if off < 0 {
		return nil, fmt.Errorf("%s: negative offset %d", what, off)
	}
	if length == 0 {
		// An empty range has no HTTP form; still report a missing object.
		if _, err := s.Head(ctx, key); err != nil {
			return nil, err
		}
		return io.NopCloser(bytes.NewReader(nil)), nil
	}
	in := &s3.GetObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(key)}
	switch {
	case length > 0:
		in.Range = aws.String(fmt.Sprintf("bytes=%d-%d", off, off+length-1))
		what = fmt.Sprintf("get %s bytes %d-%d", key, off, off+length-1)
	case off > 0:
		in.Range = aws.String(fmt.Sprintf("bytes=%d-", off))
		what = fmt.Sprintf("get %s from byte %d", key, off)
	}
	out, err := s.client.GetObject(ctx, in)
	if err != nil {
		if errorCode(err) == "InvalidRange" {
			return s.emptyRange(ctx, key, off, what, err)
		}
		return nil, s.mapErr(err, what, false)
	}
	return out.Body, nil
}

// emptyRange handles 416 InvalidRange: S3 refuses ranges that start at the
// end of an object, which store semantics define as empty.
func (s *Store) emptyRange(ctx context.Context, key string, off int64, what string, rangeErr error) (io.ReadCloser, error) {
	info, err := s.Head(ctx, key)
	if err != nil {
		return nil, err
	}
	if off == info.Size {
		return io.NopCloser(bytes.NewReader(nil)), nil
	}
	return nil, fmt.Errorf("%s: range outside object of %d bytes: %w", what, info.Size, rangeErr)
}

// Head implements store.Store. A missing bucket is reported as a missing
// object: HEAD responses carry no error code to tell them apart.
func (s *Store) Head(ctx context.Context, key string) (store.ObjectInfo, error) {
	out, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(key)})
	if err != nil {
		return store.ObjectInfo{}, s.mapErr(err, "head "+key, false)
	}
	return store.ObjectInfo{
		Key:          key,
		Size:         aws.ToInt64(out.ContentLength),
		ETag:         aws.ToString(out.ETag),
		LastModified: aws.ToTime(out.LastModified),
	}, nil
}

// List implements store.Store. With 0 < maxKeys <= 1000 it makes one request.
func (s *Store) List(ctx context.Context, prefix, startAfter string, maxKeys int, fn func(store.ObjectInfo) error) error {
	what := fmt.Sprintf("list %q", prefix)
	in := &s3.ListObjectsV2Input{Bucket: aws.String(s.bucket), Prefix: aws.String(prefix)}
	if startAfter != "" {
		in.StartAfter = aws.String(startAfter)
	}
	listed := 0
	for {
		page := maxListKeys
		if maxKeys > 0 {
			page = min(page, maxKeys-listed)
		}
		in.MaxKeys = aws.Int32(int32(page))
		out, err := s.client.ListObjectsV2(ctx, in)
		if err != nil {
			return s.mapErr(err, what, false)
		}
		for _, o := range out.Contents {
			err := fn(store.ObjectInfo{
				Key:          aws.ToString(o.Key),
				Size:         aws.ToInt64(o.Size),
				ETag:         aws.ToString(o.ETag),
				LastModified: aws.ToTime(o.LastModified),
			})
			if errors.Is(err, store.ErrStopList) {
				return nil
			}
			if err != nil {
				return err
			}
			listed++
			if maxKeys > 0 && listed >= maxKeys {
				return nil
			}
		}
		if !aws.ToBool(out.IsTruncated) || aws.ToString(out.NextContinuationToken) == "" {
			return nil
		}
		in.ContinuationToken = out.NextContinuationToken
	}
}

// Delete implements store.Store.
func (s *Store) Delete(ctx context.Context, key string) error {
	_, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(key)})
	if err != nil {
		err = s.mapErr(err, "delete "+key, false)
		if errors.Is(err, store.ErrNotExist) && !errors.Is(err, ErrNoSuchBucket) {
			return nil
		}
		return err
	}
	return nil
}

// CheckBucket makes one HEAD request on the bucket, to report a missing
// bucket or unusable credentials before any work starts.
func (s *Store) CheckBucket(ctx context.Context) error {
	_, err := s.client.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(s.bucket)})
	if err == nil {
		return nil
	}
	var nf *types.NotFound
	var nb *types.NoSuchBucket
	if errors.As(err, &nf) || errors.As(err, &nb) {
		return &storeError{
			msg:     fmt.Sprintf("check bucket: bucket %q does not exist", s.bucket),
			targets: []error{ErrNoSuchBucket, store.ErrNotExist},
			cause:   err,
		}
	}
	return s.mapErr(err, "check bucket", false)
}
