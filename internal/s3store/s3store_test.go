package s3store_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/ferrylabs/ferry/internal/s3store"
	"github.com/ferrylabs/ferry/internal/s3test"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/internal/store/storetest"
)

func TestMain(m *testing.M) { s3test.Main(m) }

func TestStore(t *testing.T) {
	t.Parallel()
	srv := s3test.Shared(t)
	var opts []storetest.Option
	if srv.Kind() == s3test.SeaweedFS {
		// Its ListParts leaves out the parts' checksums.
		opts = append(opts, storetest.PartChecksumsOptional())
	}
	storetest.Run(t, func(t *testing.T) store.Store {
		return srv.Store(t, srv.NewBucket(t))
	}, opts...)
}

// uploadMultipart uploads data in parts of partSize and returns the upload
// ID and parts, without completing.
func uploadMultipart(t *testing.T, st store.Store, key string, data []byte, partSize int) (string, []store.Part) {
	t.Helper()
	id, err := st.CreateMultipart(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	var parts []store.Part
	for off, n := 0, int32(1); off < len(data); off, n = off+partSize, n+1 {
		c := data[off:min(off+partSize, len(data))]
		p, err := st.UploadPart(t.Context(), key, id, n, bytes.NewReader(c), int64(len(c)), store.CRC32C(c))
		if err != nil {
			t.Fatal(err)
		}
		parts = append(parts, p)
	}
	return id, parts
}

// TestPartSizesBeforeComplete checks what an uploader resuming an upload
// relies on: ListParts reports each part's size and CRC32C, so it can
// verify that all non-final parts have the same size (R2 refuses the
// completion otherwise) before it completes.
func TestPartSizesBeforeComplete(t *testing.T) {
	t.Parallel()
	srv := s3test.Shared(t)
	st := srv.Store(t, srv.NewBucket(t))
	const partSize = store.MinPartSize
	data := storetest.RandomBytes(7, 3*partSize+4321)
	id, uploaded := uploadMultipart(t, st, "ckpt/model.bin", data, partSize)

	parts, err := st.ListParts(t.Context(), "ckpt/model.bin", id)
	if err != nil {
		t.Fatal(err)
	}
	if len(parts) != 4 {
		t.Fatalf("ListParts returned %d parts, want 4", len(parts))
	}
	for i, p := range parts {
		last := i == len(parts)-1
		if !last && p.Size != partSize {
			t.Errorf("non-final part %d has size %d, want %d", p.Number, p.Size, partSize)
		}
		if last && (p.Size != 4321 || p.Size > parts[0].Size) {
			t.Errorf("final part has size %d, want 4321", p.Size)
		}
		if p != uploaded[i] {
			t.Errorf("ListParts part %d = %+v, UploadPart returned %+v", i+1, p, uploaded[i])
		}
	}
	info, err := st.CompleteMultipart(t.Context(), "ckpt/model.bin", id, parts)
	if err != nil {
		t.Fatal(err)
	}
	if info.Size != int64(len(data)) || !strings.HasSuffix(strings.Trim(info.ETag, `"`), "-4") {
		t.Errorf("CompleteMultipart returned %+v, want size %d and a multipart ETag", info, len(data))
	}
	if got := storetest.MustGet(t, st, "ckpt/model.bin", 0, -1); !bytes.Equal(got, data) {
		t.Fatal("completed object differs")
	}
}

// TestListPartsPages lists more parts than one ListParts page holds (1,000).
// Parts are 1 byte: only completion checks part sizes.
func TestListPartsPages(t *testing.T) {
	t.Parallel()
	srv := s3test.Shared(t)
	st := srv.Store(t, srv.NewBucket(t))
	id, err := st.CreateMultipart(t.Context(), "many")
	if err != nil {
		t.Fatal(err)
	}
	const n = 1005
	parallel(t, n, func(i int) error {
		b := []byte{byte(i)}
		_, err := st.UploadPart(t.Context(), "many", id, int32(i+1), bytes.NewReader(b), 1, store.CRC32C(b))
		return err
	})
	parts, err := st.ListParts(t.Context(), "many", id)
	if err != nil {
		t.Fatal(err)
	}
	if len(parts) != n {
		t.Fatalf("ListParts returned %d parts, want %d", len(parts), n)
	}
	for i, p := range parts {
		if p.Number != int32(i+1) || p.Size != 1 || p.CRC32C != store.CRC32C([]byte{byte(i)}) {
			t.Fatalf("part %d = %+v", i+1, p)
		}
	}
	if err := st.AbortMultipart(t.Context(), "many", id); err != nil {
		t.Fatal(err)
	}
}

// TestListUploadsPages lists more uploads than one page holds (1,000).
func TestListUploadsPages(t *testing.T) {
	t.Parallel()
	srv := s3test.Shared(t)
	st := srv.Store(t, srv.NewBucket(t))
	const n = 1003
	ids := make([]string, n)
	parallel(t, n, func(i int) error {
		// Two uploads of key 0 check that the upload ID marker is used.
		key := fmt.Sprintf("u/%04d", max(i-1, 0))
		var err error
		ids[i], err = st.CreateMultipart(t.Context(), key)
		return err
	})
	ups, err := st.ListUploads(t.Context(), "u/")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, u := range ups {
		got[u.UploadID] = true
	}
	if len(ups) != n || len(got) != n {
		t.Fatalf("ListUploads returned %d uploads (%d distinct), want %d", len(ups), len(got), n)
	}
	for _, id := range ids {
		if !got[id] {
			t.Fatalf("upload %s not listed", id)
		}
	}
}

// parallel runs fn(0..n-1) with 16 workers and fails t on the first error.
func parallel(t *testing.T, n int, fn func(i int) error) {
	t.Helper()
	next := make(chan int)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for range 16 {
		wg.Go(func() {
			for i := range next {
				if err := fn(i); err != nil {
					mu.Lock()
					first = cmpOr(first, err)
					mu.Unlock()
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	if first != nil {
		t.Fatal(first)
	}
}

func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// TestSDKReadsBack reads what ferry wrote with a plain SDK client, to catch
// anything (an encoding, a checksum trailer) only ferry could read.
func TestSDKReadsBack(t *testing.T) {
	t.Parallel()
	srv := s3test.Shared(t)
	bucket := srv.NewBucket(t)
	st := srv.Store(t, bucket)
	small := storetest.RandomBytes(8, 300_000)
	storetest.MustPut(t, st, "small", small)
	big := storetest.RandomBytes(9, 2*store.MinPartSize+100)
	id, parts := uploadMultipart(t, st, "big", big, store.MinPartSize)
	if _, err := st.CompleteMultipart(t.Context(), "big", id, parts); err != nil {
		t.Fatal(err)
	}

	client := srv.Client(t)
	for key, want := range map[string][]byte{"small": small, "big": big} {
		out, err := client.GetObject(t.Context(), &s3.GetObjectInput{
			Bucket:       aws.String(bucket),
			Key:          aws.String(key),
			ChecksumMode: types.ChecksumModeEnabled,
		})
		if err != nil {
			t.Fatalf("SDK GetObject %s: %v", key, err)
		}
		got, err := io.ReadAll(out.Body)
		out.Body.Close()
		if err != nil {
			t.Fatalf("SDK read %s: %v", key, err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("SDK read %d bytes of %s that differ from the %d ferry wrote", len(got), key, len(want))
		}
		if out.ContentEncoding != nil && *out.ContentEncoding != "" {
			t.Errorf("%s stored with Content-Encoding %q", key, *out.ContentEncoding)
		}
		t.Logf("%s: ChecksumCRC32C %q, ChecksumType %q", key, aws.ToString(out.ChecksumCRC32C), out.ChecksumType)
	}
}

func TestCABundle(t *testing.T) {
	srv := s3test.Start(t, s3test.WithTLS())
	bucket := srv.NewBucket(t)
	t.Setenv("AWS_CA_BUNDLE", srv.CAFile)
	st, err := s3store.New(t.Context(), s3store.Config{
		Endpoint: srv.Endpoint, Region: srv.Region, Bucket: bucket,
		AccessKeyID: srv.AccessKey, SecretAccessKey: srv.SecretKey,
	})
	if err != nil {
		t.Fatal(err)
	}
	data := storetest.RandomBytes(11, 1<<20)
	storetest.MustPut(t, st, "over/tls", data)
	if got := storetest.MustGet(t, st, "over/tls", 0, -1); !bytes.Equal(got, data) {
		t.Fatal("bytes differ over TLS")
	}
	id, parts := uploadMultipart(t, st, "over/tls-mp", data, 600_000)
	if err := st.AbortMultipart(t.Context(), "over/tls-mp", id); err != nil || len(parts) != 2 {
		t.Fatalf("abort: %v (%d parts)", err, len(parts))
	}

	// Without the bundle the certificate is refused at once, not retried.
	t.Setenv("AWS_CA_BUNDLE", "")
	st2, err := s3store.New(t.Context(), s3store.Config{
		Endpoint: srv.Endpoint, Region: srv.Region, Bucket: bucket,
		AccessKeyID: srv.AccessKey, SecretAccessKey: srv.SecretKey,
	})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = st2.Head(t.Context(), "over/tls")
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("Head without the CA bundle: %v, want a certificate error", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("certificate error took %v: retried?", d)
	}
}

func TestBadCredentials(t *testing.T) {
	t.Parallel()
	srv := s3test.Shared(t)
	bucket := srv.NewBucket(t)
	for _, c := range []struct {
		name, key, secret string
		headIs404         bool
	}{
		// versitygw answers an unknown key with 404 XAdminUserNotFound
		// (S3, R2 and SeaweedFS: 403 InvalidAccessKeyId); on HEAD,
		// without a body, that is a plain 404 and reads as a missing
		// object.
		{"unknown key", "NOSUCHKEY", "nosuchsecret-shhh", srv.Kind() == s3test.Versitygw},
		{"wrong secret", srv.AccessKey, "wrongsecret-shhh", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := srv.StoreWith(t, s3store.Config{Bucket: bucket, AccessKeyID: c.key, SecretAccessKey: c.secret})
			_, err := st.Put(t.Context(), "k", bytes.NewReader([]byte("x")), 1, store.PutOptions{})
			checkCredentialsError(t, "Put", err, bucket)
			_, err = st.Head(t.Context(), "k")
			if c.headIs404 {
				if !errors.Is(err, store.ErrNotExist) {
					t.Errorf("Head: %v, want versitygw's 404", err)
				}
			} else {
				checkCredentialsError(t, "Head", err, bucket)
			}
			err = st.List(t.Context(), "", "", 0, func(store.ObjectInfo) error { return nil })
			checkCredentialsError(t, "List", err, bucket)
		})
	}
}

func checkCredentialsError(t *testing.T, op string, err error, bucket string) {
	t.Helper()
	if !errors.Is(err, s3store.ErrAccessDenied) {
		t.Fatalf("%s: %v, want ErrAccessDenied", op, err)
	}
	msg := err.Error()
	if !strings.Contains(msg, "check the credentials") || !strings.Contains(msg, bucket) ||
		strings.Contains(msg, "\n") || strings.Contains(msg, "shhh") {
		t.Errorf("%s: message %q: want one line naming the bucket and the credentials, without the secret", op, msg)
	}
	t.Logf("%s: %s", op, msg)
}

func TestMissingBucket(t *testing.T) {
	t.Parallel()
	srv := s3test.Shared(t)
	const bucket = "ferry-no-such-bucket"
	st := srv.Store(t, bucket)
	want := `bucket "ferry-no-such-bucket" does not exist`
	check := func(op string, err error) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), want) || !errors.Is(err, s3store.ErrNoSuchBucket) {
			t.Errorf("%s: %v, want an error saying %s", op, err, want)
		}
	}
	_, err := st.Put(t.Context(), "k", bytes.NewReader([]byte("x")), 1, store.PutOptions{})
	check("Put", err)
	check("List", st.List(t.Context(), "", "", 0, func(store.ObjectInfo) error { return nil }))
	_, err = st.CreateMultipart(t.Context(), "k")
	check("CreateMultipart", err)
	_, err = st.Get(t.Context(), "k", 0, -1)
	check("Get", err)
	check("CheckBucket", st.CheckBucket(t.Context()))
	check("Delete", st.Delete(t.Context(), "k"))
	// HEAD responses have no body, so a missing bucket looks like a missing
	// key there.
	if _, err := st.Head(t.Context(), "k"); !errors.Is(err, store.ErrNotExist) {
		t.Errorf("Head: %v, want ErrNotExist", err)
	}
}

// TestWire checks the requests on the wire over plain HTTP: unsigned
// payloads carrying a CRC32C header, no SDK-added checksums, no
// aws-chunked encoding and no Expect: 100-continue.
func TestWire(t *testing.T) {
	t.Parallel()
	srv := s3test.Shared(t)
	bucket := srv.NewBucket(t)
	px := newProxy(t, srv.Endpoint)
	st := srv.StoreWith(t, s3store.Config{Endpoint: px.URL, Bucket: bucket})

	data := storetest.RandomBytes(12, 3<<20)
	storetest.MustPut(t, st, "put", data)
	if _, err := st.Put(t.Context(), "cond", bytes.NewReader(data), int64(len(data)), store.PutOptions{IfNoneMatch: true}); err != nil {
		t.Fatal(err)
	}
	id, parts := uploadMultipart(t, st, "mp", append(data, data...), 5<<20)
	if _, err := st.CompleteMultipart(t.Context(), "mp", id, parts); err != nil {
		t.Fatal(err)
	}

	puts := px.requests("PutObject")
	if len(puts) != 2 {
		t.Fatalf("saw %d PutObject requests, want 2", len(puts))
	}
	for _, r := range append(puts, px.requests("UploadPart")...) {
		h := r.header
		if got := h.Get("X-Amz-Content-Sha256"); got != "UNSIGNED-PAYLOAD" {
			t.Errorf("%s: x-amz-content-sha256 %q, want UNSIGNED-PAYLOAD", r.op, got)
		}
		for _, name := range []string{"Expect", "Content-Encoding", "X-Amz-Checksum-Crc32", "X-Amz-Sdk-Checksum-Algorithm", "X-Amz-Trailer", "X-Amz-Decoded-Content-Length"} {
			if v := h.Get(name); v != "" {
				t.Errorf("%s: unexpected header %s: %s", r.op, name, v)
			}
		}
	}
	if got := puts[0].header.Get("X-Amz-Checksum-Crc32c"); got != store.CRC32C(data) {
		t.Errorf("PutObject x-amz-checksum-crc32c %q, want %q", got, store.CRC32C(data))
	}
	if got := puts[1].header.Get("If-None-Match"); got != "*" {
		t.Errorf("conditional PutObject If-None-Match %q, want *", got)
	}
	if got := puts[1].header.Get("X-Amz-Checksum-Crc32c"); got != "" {
		t.Errorf("PutObject without a CRC32C option sent x-amz-checksum-crc32c %q", got)
	}
	for i, r := range px.requests("UploadPart") {
		if got := r.header.Get("X-Amz-Checksum-Crc32c"); got != parts[i].CRC32C {
			t.Errorf("UploadPart %d x-amz-checksum-crc32c %q, want %q", i+1, got, parts[i].CRC32C)
		}
	}
	if got := px.requests("CreateMultipartUpload")[0].header.Get("X-Amz-Checksum-Algorithm"); got != "CRC32C" {
		t.Errorf("CreateMultipartUpload x-amz-checksum-algorithm %q, want CRC32C", got)
	}
	body := px.requests("CompleteMultipartUpload")[0].body
	for _, p := range parts {
		if !strings.Contains(body, "<ChecksumCRC32C>"+p.CRC32C+"</ChecksumCRC32C>") {
			t.Errorf("CompleteMultipartUpload body lacks part %d's CRC32C: %s", p.Number, body)
		}
	}
}

// TestRetries injects throttling, server errors and broken connections and
// checks that every operation recovers, bodies are rewound, and the counter
// sees every attempt.
func TestRetries(t *testing.T) {
	t.Parallel()
	srv := s3test.Shared(t)
	bucket := srv.NewBucket(t)
	px := newProxy(t, srv.Endpoint)
	var counts s3store.Counters
	st := srv.StoreWith(t, s3store.Config{Endpoint: px.URL, Bucket: bucket, OnRequest: counts.Count})

	px.inject("PutObject", fault{cut: true}, fault{status: 500, code: "InternalError"})
	px.inject("UploadPart", fault{cut: true}, fault{status: 503, code: "SlowDown"})
	px.inject("CreateMultipartUpload", fault{status: 500, code: "InternalError"})
	// The second attempt completes the upload but its response is lost; the
	// third finds no upload, as on a server where completing twice fails
	// (versitygw v1.8.0 and AWS S3 answer 200 again).
	px.inject("CompleteMultipartUpload", fault{status: 400, code: "RequestTimeout"}, fault{lose: true},
		fault{status: 404, code: "NoSuchUpload"})
	px.inject("ListObjectsV2", fault{status: 429, code: "TooManyRequests"})
	px.inject("GetObject", fault{status: 503, code: "ServiceUnavailable"})
	px.inject("HeadObject", fault{status: 502})

	data := storetest.RandomBytes(13, 2<<20)
	storetest.MustPut(t, st, "put", data)
	mp := storetest.RandomBytes(14, store.MinPartSize+1000)
	id, parts := uploadMultipart(t, st, "mp", mp, store.MinPartSize)
	if _, err := st.CompleteMultipart(t.Context(), "mp", id, parts); err != nil {
		t.Fatal(err)
	}
	var keys []string
	if err := st.List(t.Context(), "", "", 0, func(o store.ObjectInfo) error { keys = append(keys, o.Key); return nil }); err != nil {
		t.Fatal(err)
	}
	if strings.Join(keys, ",") != "mp,put" {
		t.Errorf("listed %q", keys)
	}
	if got := storetest.MustGet(t, st, "put", 0, -1); !bytes.Equal(got, data) {
		t.Error("put object differs after retried uploads")
	}
	if got := storetest.MustGet(t, st, "mp", 0, -1); !bytes.Equal(got, mp) {
		t.Error("multipart object differs after retried uploads")
	}
	if _, err := st.Head(t.Context(), "mp"); err != nil {
		t.Fatal(err)
	}

	want := map[string]int64{
		"PutObject":               3,
		"CreateMultipartUpload":   2,
		"UploadPart":              4,
		"CompleteMultipartUpload": 3,
		"ListObjectsV2":           2,
		"GetObject":               3,
		"HeadObject":              3, // one to find the lost completion
	}
	got := counts.Snapshot()
	for op, n := range want {
		if got[op] != n {
			t.Errorf("%s: counted %d attempts, want %d", op, got[op], n)
		}
	}
	if len(got) != len(want) {
		t.Errorf("counted operations %v, want those of %v", got, want)
	}
	for op, n := range want {
		if seen := int64(len(px.requests(op))); seen != n {
			t.Errorf("%s: proxy saw %d requests, counter %d", op, seen, n)
		}
	}
}

// TestCancel checks that a cancelled context ends a call without retries.
func TestCancel(t *testing.T) {
	t.Parallel()
	srv := s3test.Shared(t)
	st := srv.Store(t, srv.NewBucket(t))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := st.Put(ctx, "k", bytes.NewReader([]byte("x")), 1, store.PutOptions{})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Put with a cancelled context: %v, want context.Canceled", err)
	}
}
