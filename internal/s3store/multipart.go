package s3store

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"go.uber.org/zap"

	"github.com/ferrylabs/ferry/internal/store"
)

// CreateMultipart implements store.Store. The upload is declared CRC32C so
// that the server keeps each part's checksum (ListParts returns it) and
// checks them again on completion.
func (s *Store) CreateMultipart(ctx context.Context, key string) (string, error) {
	out, err := s.client.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{
		Bucket:            aws.String(s.bucket),
		Key:               aws.String(key),
		ChecksumAlgorithm: types.ChecksumAlgorithmCrc32c,
	})
	if err != nil {
		return "", s.mapErr(err, "create multipart upload of "+key, false)
	}
	return aws.ToString(out.UploadId), nil
}

// UploadPart implements store.Store. Part uploads are idempotent, so every
// failed attempt is retried with the body rewound.
func (s *Store) UploadPart(ctx context.Context, key, uploadID string, n int32, body io.ReadSeeker, size int64, crc32c string) (store.Part, error) {
	what := fmt.Sprintf("upload part %d of %s", n, key)
	if crc32c == "" {
		return store.Part{}, fmt.Errorf("%s: no CRC32C given", what)
	}
	if err := rewind(body, size); err != nil {
		return store.Part{}, fmt.Errorf("%s: %w", what, err)
	}
	out, err := s.client.UploadPart(ctx, &s3.UploadPartInput{
		Bucket:         aws.String(s.bucket),
		Key:            aws.String(key),
		UploadId:       aws.String(uploadID),
		PartNumber:     aws.Int32(n),
		Body:           body,
		ContentLength:  aws.Int64(size),
		ChecksumCRC32C: aws.String(crc32c),
	}, unsignedPayload)
	if err != nil {
		return store.Part{}, s.mapErr(err, what, false)
	}
	return store.Part{Number: n, Size: size, ETag: aws.ToString(out.ETag), CRC32C: crc32c}, nil
}

// ListParts implements store.Store.
func (s *Store) ListParts(ctx context.Context, key, uploadID string) ([]store.Part, error) {
	what := "list parts of " + key
	in := &s3.ListPartsInput{Bucket: aws.String(s.bucket), Key: aws.String(key), UploadId: aws.String(uploadID)}
	var parts []store.Part
	for {
		out, err := s.client.ListParts(ctx, in)
		if err != nil {
			return nil, s.mapErr(err, what, false)
		}
		for _, p := range out.Parts {
			parts = append(parts, store.Part{
				Number: aws.ToInt32(p.PartNumber),
				Size:   aws.ToInt64(p.Size),
				ETag:   aws.ToString(p.ETag),
				CRC32C: aws.ToString(p.ChecksumCRC32C),
			})
		}
		next := aws.ToString(out.NextPartNumberMarker)
		if !aws.ToBool(out.IsTruncated) || next == "" || next == aws.ToString(in.PartNumberMarker) {
			return parts, nil
		}
		in.PartNumberMarker = aws.String(next)
	}
}

// CompleteMultipart implements store.Store. The returned Size is the sum of
// the given parts' sizes, so give parts as UploadPart or ListParts returned
// them; LastModified is left zero.
func (s *Store) CompleteMultipart(ctx context.Context, key, uploadID string, parts []store.Part) (store.ObjectInfo, error) {
	completed := make([]types.CompletedPart, len(parts))
	var size int64
	for i, p := range parts {
		completed[i] = types.CompletedPart{PartNumber: aws.Int32(p.Number), ETag: aws.String(p.ETag)}
		if p.CRC32C != "" {
			completed[i].ChecksumCRC32C = aws.String(p.CRC32C)
		}
		size += p.Size
	}
	out, err := s.client.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{
		Bucket:          aws.String(s.bucket),
		Key:             aws.String(key),
		UploadId:        aws.String(uploadID),
		MultipartUpload: &types.CompletedMultipartUpload{Parts: completed},
	})
	if err != nil {
		err = s.mapErr(err, fmt.Sprintf("complete multipart upload of %s (%d parts)", key, len(parts)), false)
		if errors.Is(err, store.ErrNotExist) && !errors.Is(err, ErrNoSuchBucket) {
			if info, ok := s.completedBefore(ctx, key, parts, size); ok {
				return info, nil
			}
		}
		return store.ObjectInfo{}, err
	}
	return store.ObjectInfo{Key: key, Size: size, ETag: aws.ToString(out.ETag)}, nil
}

// completedBefore reports whether key already holds exactly these parts:
// when a completion succeeds but its response is lost, the retry finds the
// upload gone (NoSuchUpload). The object's composite CRC32C, a CRC32C over
// the parts' CRC32Cs, identifies the parts.
func (s *Store) completedBefore(ctx context.Context, key string, parts []store.Part, size int64) (store.ObjectInfo, bool) {
	want, ok := compositeCRC32C(parts)
	if !ok {
		return store.ObjectInfo{}, false
	}
	out, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{
		Bucket:       aws.String(s.bucket),
		Key:          aws.String(key),
		ChecksumMode: types.ChecksumModeEnabled,
	})
	if err != nil || aws.ToString(out.ChecksumCRC32C) != want || aws.ToInt64(out.ContentLength) != size {
		return store.ObjectInfo{}, false
	}
	s.log.Debug("multipart upload was completed by an earlier attempt", zap.String("key", key))
	return store.ObjectInfo{Key: key, Size: size, ETag: aws.ToString(out.ETag), LastModified: aws.ToTime(out.LastModified)}, true
}

// compositeCRC32C returns the checksum S3 gives an object assembled from
// parts with CRC32C checksums: base64(CRC32C(sum1 || sum2 || ...)) + "-N".
func compositeCRC32C(parts []store.Part) (string, bool) {
	if len(parts) == 0 {
		return "", false
	}
	h := crc32.New(crc32.MakeTable(crc32.Castagnoli))
	for _, p := range parts {
		sum, err := base64.StdEncoding.DecodeString(p.CRC32C)
		if err != nil || len(sum) != 4 {
			return "", false
		}
		h.Write(sum)
	}
	return fmt.Sprintf("%s-%d", store.EncodeCRC32C(h.Sum32()), len(parts)), true
}

// AbortMultipart implements store.Store.
func (s *Store) AbortMultipart(ctx context.Context, key, uploadID string) error {
	_, err := s.client.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{
		Bucket:   aws.String(s.bucket),
		Key:      aws.String(key),
		UploadId: aws.String(uploadID),
	})
	return s.mapErr(err, "abort multipart upload of "+key, false)
}

// ListUploads implements store.Store.
func (s *Store) ListUploads(ctx context.Context, prefix string) ([]store.Upload, error) {
	what := fmt.Sprintf("list multipart uploads under %q", prefix)
	in := &s3.ListMultipartUploadsInput{Bucket: aws.String(s.bucket), Prefix: aws.String(prefix)}
	var ups []store.Upload
	noIDMarker := false
	for {
		out, err := s.client.ListMultipartUploads(ctx, in)
		if err != nil && in.UploadIdMarker != nil && errorCode(err) == "InvalidArgument" {
			// versitygw v1.8.0 refuses the upload-id-marker it returned
			// (it looks the ID up among keys after key-marker only). Go on
			// with key-marker alone: on such a server the remaining uploads
			// of that one key are skipped.
			s.log.Debug("server refused upload-id-marker; paging by key only", zap.Error(err))
			in.UploadIdMarker, noIDMarker = nil, true
			out, err = s.client.ListMultipartUploads(ctx, in)
		}
		if err != nil {
			return nil, s.mapErr(err, what, false)
		}
		for _, u := range out.Uploads {
			ups = append(ups, store.Upload{
				Key:       aws.ToString(u.Key),
				UploadID:  aws.ToString(u.UploadId),
				Initiated: aws.ToTime(u.Initiated),
			})
		}
		if !aws.ToBool(out.IsTruncated) {
			return ups, nil
		}
		nextKey, nextID := aws.ToString(out.NextKeyMarker), aws.ToString(out.NextUploadIdMarker)
		if nextKey == "" && nextID == "" {
			return ups, nil
		}
		if nextKey == aws.ToString(in.KeyMarker) && nextID == aws.ToString(in.UploadIdMarker) {
			return nil, fmt.Errorf("%s: server repeated marker %q", what, nextKey+" "+nextID)
		}
		in.KeyMarker, in.UploadIdMarker = nonEmpty(nextKey), nonEmpty(nextID)
		if noIDMarker {
			in.UploadIdMarker = nil
		}
	}
}

// nonEmpty returns nil for "", so that an empty marker is not sent.
func nonEmpty(v string) *string {
	if v == "" {
		return nil
	}
	return aws.String(v)
}
