package doctor

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/ferrylabs/ferry/internal/s3store"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/manifest"
)

// permissions writes, reads, lists and deletes a scratch object under the
// prefix, and uploads one of three parts (two equal, a shorter last one,
// as R2 requires and ferry sends) by multipart, then deletes it: one
// result per permission. Whatever it wrote is deleted, or the delete's
// failure names the key left.
func permissions(ctx context.Context, cfg Config) []Result {
	var id [6]byte
	_, _ = rand.Read(id[:])
	dir := manifest.ScratchPrefix(cfg.Prefix)
	key := dir + "doctor-" + hex.EncodeToString(id[:])
	mpKey := key + "-multipart"
	body := []byte("ferry doctor " + time.Now().UTC().Format(time.RFC3339) + "\n")
	rs := make([]Result, 0, 5)
	grant := func(action string) string {
		return fmt.Sprintf("grant %s on %s/%s* (R2: an Object Read & Write API token for the bucket)", action, cfg.Bucket, dir)
	}

	_, err := cfg.Store.Put(ctx, key, bytes.NewReader(body), int64(len(body)), store.PutOptions{CRC32C: store.CRC32C(body)})
	if err != nil {
		rs = append(rs, fail("write (PUT)", grant("s3:PutObject"), "PUT %s refused: %s", key, reason(err)))
		return append(rs, skipAll("nothing written", "read (GET)", "list", "multipart", "delete")...)
	}
	rs = append(rs, ok("write (PUT)", "PUT %s", key))
	rs = append(rs, readBack(ctx, cfg, key, body, grant), listed(ctx, cfg, dir, key, grant))
	rs = append(rs, multipart(ctx, cfg, mpKey, grant))
	return append(rs, deleteAll(ctx, cfg, grant, key, mpKey))
}

func readBack(ctx context.Context, cfg Config, key string, want []byte, grant func(string) string) Result {
	rc, err := cfg.Store.Get(ctx, key, 0, -1)
	if err != nil {
		return fail("read (GET)", grant("s3:GetObject"), "GET %s refused: %s", key, reason(err))
	}
	defer rc.Close()
	got, err := io.ReadAll(rc)
	switch {
	case err != nil:
		return fail("read (GET)", "see the error", "GET %s: %v", key, err)
	case !bytes.Equal(got, want):
		return fail("read (GET)", "check for a proxy or gateway that changes bodies", "GET %s returned %d bytes that differ from the %d written", key, len(got), len(want))
	}
	return ok("read (GET)", "read back the %d bytes written", len(got))
}

func listed(ctx context.Context, cfg Config, dir, key string, grant func(string) string) Result {
	found := false
	err := cfg.Store.List(ctx, dir, "", 0, func(o store.ObjectInfo) error {
		found = found || o.Key == key
		return nil
	})
	switch {
	case err != nil:
		return fail("list", grant("s3:ListBucket"), "LIST %s refused: %s", dir, reason(err))
	case !found:
		return fail("list", "ferry needs read-after-write listing: use a store that lists what it has written", "LIST %s does not show %s just written", dir, key)
	}
	return ok("list", "LIST %s shows the object just written", dir)
}

// multipart uploads two parts of partSize and a last one of 1 KiB, and
// completes the upload: what the uploader does with every large file.
func multipart(ctx context.Context, cfg Config, key string, grant func(string) string) Result {
	const check = "multipart"
	partSize := max(cfg.MultipartSize, store.MinPartSize)
	id, err := cfg.Store.CreateMultipart(ctx, key)
	if err != nil {
		return fail(check, grant("s3:PutObject"), "CreateMultipartUpload of %s refused: %s", key, reason(err))
	}
	data := make([]byte, 2*partSize+1024)
	_, _ = rand.Read(data)
	var parts []store.Part
	for n, off := int32(1), int64(0); off < int64(len(data)); n, off = n+1, off+partSize {
		c := data[off:min(off+partSize, int64(len(data)))]
		p, err := cfg.Store.UploadPart(ctx, key, id, n, bytes.NewReader(c), int64(len(c)), store.CRC32C(c))
		if err != nil {
			abort(ctx, cfg.Store, key, id)
			return fail(check, grant("s3:PutObject"), "UploadPart %d of %s refused: %s", n, key, reason(err))
		}
		parts = append(parts, p)
	}
	info, err := cfg.Store.CompleteMultipart(ctx, key, id, parts)
	if err != nil {
		abort(ctx, cfg.Store, key, id)
		fix := "see the error"
		if s3store.ErrorCode(err) == "InvalidPart" {
			fix = "the store refuses parts ferry sends (equal parts, CRC32C): report it with this line"
		}
		return fail(check, fix, "CompleteMultipartUpload of %s (%d equal parts of %d bytes and one of 1024) failed: %s", key, len(parts)-1, partSize, reason(err))
	}
	head, err := cfg.Store.Head(ctx, key)
	if err != nil || head.Size != int64(len(data)) {
		return fail(check, "check the store's multipart support", "the completed object %s: size %d, %v; want %d bytes", key, head.Size, err, len(data))
	}
	return ok(check, "3 parts (2 equal of %d bytes, 1 of 1024) uploaded and completed, ETag %s", partSize, info.ETag)
}

func abort(ctx context.Context, st store.Store, key, id string) {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	_ = st.AbortMultipart(actx, key, id)
}

// deleteAll deletes the scratch objects, checks they are gone and that no
// upload of the check is left.
func deleteAll(ctx context.Context, cfg Config, grant func(string) string, keys ...string) Result {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	var errs []error
	for _, k := range keys {
		if err := cfg.Store.Delete(dctx, k); err != nil {
			errs = append(errs, fmt.Errorf("DELETE %s: %s", k, reason(err)))
			continue
		}
		if _, err := cfg.Store.Head(dctx, k); !errors.Is(err, store.ErrNotExist) {
			errs = append(errs, fmt.Errorf("%s still there after DELETE (%v)", k, err))
		}
	}
	if len(errs) > 0 {
		return fail("delete", grant("s3:DeleteObject")+", and delete what is left by hand; ferry agent --keep-remote and ferry prune need it",
			"%v", errors.Join(errs...))
	}
	return ok("delete", "the %d scratch objects deleted: nothing left in the bucket", len(keys))
}
