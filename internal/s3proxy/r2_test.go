package s3proxy_test

import (
	"bytes"
	"crypto/md5"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/ferrylabs/ferry/internal/s3proxy"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/internal/store/storetest"
)

// r2Fixture is a fixture whose proxy applies the R2 rules.
func r2Fixture(t *testing.T) *fixture {
	t.Helper()
	return newFixture(t, s3proxy.Config{R2Rules: true})
}

// refused fails t unless err is the S3 error code with HTTP status, sent
// by the proxy for an R2 rule whose explanation contains detail.
func (f *fixture) refused(t *testing.T, err error, status int, code, detail string) {
	t.Helper()
	var apiErr smithy.APIError
	var respErr *smithyhttp.ResponseError
	if !errors.As(err, &apiErr) || !errors.As(err, &respErr) {
		t.Fatalf("got %v, want %d %s", err, status, code)
	}
	if apiErr.ErrorCode() != code || respErr.HTTPStatusCode() != status {
		t.Errorf("got %d %s (%v), want %d %s", respErr.HTTPStatusCode(), apiErr.ErrorCode(), err, status, code)
	}
	f.refusedRaw(t, detail)
}

// refusedRaw fails t unless the last violation the proxy recorded
// explains itself with detail.
func (f *fixture) refusedRaw(t *testing.T, detail string) {
	t.Helper()
	v := f.px.Violations()
	if len(v) == 0 {
		t.Fatalf("the proxy recorded no violation, want one about %q", detail)
	}
	if last := v[len(v)-1]; !strings.Contains(last.Rejected, detail) {
		t.Errorf("violation %q, want one about %q", last.Rejected, detail)
	}
}

func (f *fixture) noViolations(t *testing.T) {
	t.Helper()
	for _, v := range f.px.Violations() {
		t.Errorf("refused: %v", v)
	}
}

// TestR2AcceptsFerrysRequests sends what ferry sends: CRC32C on PUTs and
// parts, composite CRC32C uploads of equal parts and a smaller last one.
func TestR2AcceptsFerrysRequests(t *testing.T) {
	t.Parallel()
	f := r2Fixture(t)
	st := f.store(t)
	put(t, st, "manifest.json", []byte(`{}`))
	if _, err := st.Put(t.Context(), "m2", bytes.NewReader([]byte("x")), 1, store.PutOptions{IfNoneMatch: true, CRC32C: store.CRC32C([]byte("x"))}); err != nil {
		t.Fatal(err)
	}
	data := randomBytes(9, 2*5*mib+100)
	id, parts := uploadParts(t, st, "big", data, 5*mib)
	if _, err := st.ListParts(t.Context(), "big", id); err != nil {
		t.Fatal(err)
	}
	if _, err := st.CompleteMultipart(t.Context(), "big", id, parts); err != nil {
		t.Fatal(err)
	}
	if got := storetest.MustGet(t, st, "big", 5*mib-1, 2); !bytes.Equal(got, data[5*mib-1:5*mib+1]) {
		t.Error("ranged GET differs")
	}
	single := []byte("one part only, under 5 MiB")
	id, parts = uploadParts(t, st, "single", single, 5*mib)
	if _, err := st.CompleteMultipart(t.Context(), "single", id, parts); err != nil {
		t.Fatal(err)
	}
	f.noViolations(t)
}

// TestR2PartSizes checks the multipart size rules at completion.
func TestR2PartSizes(t *testing.T) {
	t.Parallel()
	f := r2Fixture(t)
	st := f.store(t)
	for _, c := range []struct {
		name   string
		sizes  []int
		code   string
		detail string
	}{
		{"unequal", []int{5*mib + 1, 5 * mib, 1}, "InvalidPart", "non-final part 2 is 5242880 bytes but part 1 is 5242881"},
		{"last-larger", []int{5 * mib, 5*mib + 1}, "InvalidPart", "final part 2 is 5242881 bytes, larger"},
		{"small", []int{mib, mib, 1}, "EntityTooSmall", "non-final part 1 is 1048576 bytes"},
		{"equal", []int{5 * mib, 5 * mib, 5 * mib}, "", ""},
	} {
		key := "sizes/" + c.name
		id, err := st.CreateMultipart(t.Context(), key)
		if err != nil {
			t.Fatal(err)
		}
		var parts []store.Part
		for i, n := range c.sizes {
			b := randomBytes(uint64(i), n)
			p, err := st.UploadPart(t.Context(), key, id, int32(i+1), bytes.NewReader(b), int64(n), store.CRC32C(b))
			if err != nil {
				t.Fatalf("%s: upload part %d: %v", c.name, i+1, err)
			}
			parts = append(parts, p)
		}
		_, err = st.CompleteMultipart(t.Context(), key, id, parts)
		if c.code == "" {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
			continue
		}
		f.refused(t, err, http.StatusBadRequest, c.code, c.detail)
		if c.code == "InvalidPart" && !strings.Contains(err.Error(), "All non-trailing parts must have the same length.") {
			t.Errorf("%s: error %q lacks R2's message", c.name, err)
		}
	}
}

// TestR2PartNumber refuses part 10,001, once: a refusal is not retried.
func TestR2PartNumber(t *testing.T) {
	t.Parallel()
	f := r2Fixture(t)
	st := f.store(t)
	id, err := st.CreateMultipart(t.Context(), "k")
	if err != nil {
		t.Fatal(err)
	}
	// A whole part: the client gets the answer, not a broken connection
	// it would retry.
	part := randomBytes(10, 6*mib)
	_, err = st.UploadPart(t.Context(), "k", id, 10001, bytes.NewReader(part), int64(len(part)), store.CRC32C(part))
	f.refused(t, err, http.StatusBadRequest, "InvalidArgument", `part number "10001" outside 1..10000`)
	if n := f.px.Counts()[s3proxy.OpUploadPart]; n != 1 {
		t.Errorf("%d UploadPart requests, want 1", n)
	}
}

// TestR2Expect100Continue refuses Expect: 100-continue.
func TestR2Expect100Continue(t *testing.T) {
	t.Parallel()
	f := r2Fixture(t)
	_, err := f.view.Client(t).PutObject(t.Context(), &s3.PutObjectInput{
		Bucket: aws.String(f.bucket), Key: aws.String("k"), Body: bytes.NewReader([]byte("body")),
	}, s3.WithAPIOptions(smithyhttp.AddHeaderValue("Expect", "100-continue")))
	f.refused(t, err, http.StatusBadRequest, "InvalidRequest", "Expect: 100-continue")
}

// TestR2OneChecksum refuses Content-MD5 with another checksum, and accepts
// either alone.
func TestR2OneChecksum(t *testing.T) {
	t.Parallel()
	f := r2Fixture(t)
	client := f.view.Client(t)
	body := []byte("body")
	md5sum := md5.Sum(body)
	contentMD5 := base64.StdEncoding.EncodeToString(md5sum[:])
	// A key each: two writes to one key within a second would meet R2's
	// per-key write rate.
	in := func(key string) *s3.PutObjectInput {
		return &s3.PutObjectInput{Bucket: aws.String(f.bucket), Key: aws.String(key), Body: bytes.NewReader(body)}
	}
	both := in("both")
	both.ContentMD5, both.ChecksumCRC32C = aws.String(contentMD5), aws.String(store.CRC32C(body))
	_, err := client.PutObject(t.Context(), both)
	f.refused(t, err, http.StatusBadRequest, "InvalidRequest", "Content-MD5 together with x-amz-checksum-crc32c")
	if !strings.Contains(err.Error(), "You can only specify one non-default checksum at a time.") {
		t.Errorf("error %q lacks R2's message", err)
	}
	n := len(f.px.Violations())
	onlyMD5 := in("md5")
	onlyMD5.ContentMD5 = aws.String(contentMD5)
	if _, err := client.PutObject(t.Context(), onlyMD5); err != nil {
		t.Errorf("Content-MD5 alone: %v", err)
	}
	sha := in("sha256")
	sum := sha256.Sum256(body)
	sha.ChecksumSHA256 = aws.String(base64.StdEncoding.EncodeToString(sum[:]))
	if _, err := client.PutObject(t.Context(), sha); err != nil {
		t.Errorf("SHA-256 on PutObject: %v", err)
	}
	if len(f.px.Violations()) != n {
		t.Errorf("accepted requests were refused: %v", f.px.Violations()[n:])
	}
}

// TestR2ChecksumTypes checks R2's table of checksum algorithms and types.
func TestR2ChecksumTypes(t *testing.T) {
	t.Parallel()
	f := r2Fixture(t)
	client := f.view.Client(t)
	create := func(key string, alg types.ChecksumAlgorithm, typ types.ChecksumType) (string, error) {
		out, err := client.CreateMultipartUpload(t.Context(), &s3.CreateMultipartUploadInput{
			Bucket: aws.String(f.bucket), Key: aws.String(key), ChecksumAlgorithm: alg, ChecksumType: typ,
		})
		if err != nil {
			return "", err
		}
		return aws.ToString(out.UploadId), nil
	}
	_, err := create("a", types.ChecksumAlgorithmCrc32c, types.ChecksumTypeFullObject)
	f.refused(t, err, http.StatusNotImplemented, "NotImplemented", "CRC32C checksums of type FULL_OBJECT")
	_, err = create("b", types.ChecksumAlgorithmCrc64nvme, types.ChecksumTypeComposite)
	f.refused(t, err, http.StatusNotImplemented, "NotImplemented", "CRC64NVME checksums of type COMPOSITE")
	n := len(f.px.Violations())
	if _, err := create("c", types.ChecksumAlgorithmCrc64nvme, types.ChecksumTypeFullObject); len(f.px.Violations()) != n {
		t.Errorf("a CRC64NVME full-object upload was refused (server: %v)", err)
	}

	id, err := create("d", types.ChecksumAlgorithmCrc32c, "")
	if err != nil {
		t.Fatal(err)
	}
	part := randomBytes(1, 1024)
	_, err = client.UploadPart(t.Context(), &s3.UploadPartInput{
		Bucket: aws.String(f.bucket), Key: aws.String("d"), UploadId: aws.String(id), PartNumber: aws.Int32(1),
		Body: bytes.NewReader(part), ChecksumCRC64NVME: aws.String("AAAAAAAAAAA="),
	})
	f.refused(t, err, http.StatusNotImplemented, "NotImplemented", "composite CRC64NVME")
	up, err := client.UploadPart(t.Context(), &s3.UploadPartInput{
		Bucket: aws.String(f.bucket), Key: aws.String("d"), UploadId: aws.String(id), PartNumber: aws.Int32(1),
		Body: bytes.NewReader(part), ChecksumCRC32C: aws.String(store.CRC32C(part)),
	})
	if err != nil {
		t.Fatal(err)
	}
	_, err = client.CompleteMultipartUpload(t.Context(), &s3.CompleteMultipartUploadInput{
		Bucket: aws.String(f.bucket), Key: aws.String("d"), UploadId: aws.String(id),
		ChecksumType: types.ChecksumTypeFullObject, ChecksumCRC32C: aws.String(store.CRC32C(part)),
		MultipartUpload: &types.CompletedMultipartUpload{Parts: []types.CompletedPart{
			{PartNumber: aws.Int32(1), ETag: up.ETag, ChecksumCRC32C: aws.String(store.CRC32C(part))},
		}},
	})
	f.refused(t, err, http.StatusNotImplemented, "NotImplemented", "CRC32C checksum of type FULL_OBJECT")

	_, err = client.PutObject(t.Context(), &s3.PutObjectInput{
		Bucket: aws.String(f.bucket), Key: aws.String("e"), Body: bytes.NewReader(part),
	}, s3.WithAPIOptions(smithyhttp.AddHeaderValue("X-Amz-Checksum-Sha512", "AAAA")))
	f.refused(t, err, http.StatusNotImplemented, "NotImplemented", "SHA512 is not one R2 supports")
}

// TestR2KeyLength refuses keys over 1,024 bytes.
func TestR2KeyLength(t *testing.T) {
	t.Parallel()
	f := r2Fixture(t)
	_, err := f.store(t).Put(t.Context(), strings.Repeat("k", 1025), bytes.NewReader(nil), 0, store.PutOptions{})
	f.refused(t, err, http.StatusBadRequest, "KeyTooLongError", "key of 1025 bytes")
}

// zeros is an endless source of zero bytes.
type zeros struct{}

func (zeros) Read(b []byte) (int, error) { clear(b); return len(b), nil }

// raw sends an unsigned request to the proxy and returns the status and S3
// error code. The rules it tests refuse before forwarding, so the missing
// signature never matters.
func (f *fixture) raw(t *testing.T, method, path string, size int64, body io.Reader) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, f.view.Endpoint+"/"+f.bucket+"/"+path, body)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = size
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	code, _, _ := strings.Cut(string(b), "</Code>")
	_, code, _ = strings.Cut(code, "<Code>")
	return resp.StatusCode, code
}

// TestR2SizeLimits refuses a single PUT over 5 GiB - 5 MiB and a part over
// 5 GiB from their declared length, without sending them.
func TestR2SizeLimits(t *testing.T) {
	t.Parallel()
	f := r2Fixture(t)
	const maxPut = 5<<30 - 5<<20
	status, code := f.raw(t, http.MethodPut, "huge", maxPut+1, io.LimitReader(zeros{}, maxPut+1))
	if status != http.StatusBadRequest || code != "EntityTooLarge" {
		t.Errorf("PUT of %d bytes: %d %s", maxPut+1, status, code)
	}
	f.refusedRaw(t, "PutObject of 5363466241 bytes")
	status, code = f.raw(t, http.MethodPut, "huge?partNumber=1&uploadId=u", 5<<30+1, io.LimitReader(zeros{}, 5<<30+1))
	if status != http.StatusBadRequest || code != "EntityTooLarge" {
		t.Errorf("part of 5 GiB + 1: %d %s", status, code)
	}
	f.refusedRaw(t, "part 1 of 5368709121 bytes")
}

// TestR2TooManyParts refuses a completion naming more than 10,000 parts.
func TestR2TooManyParts(t *testing.T) {
	t.Parallel()
	f := r2Fixture(t)
	var b strings.Builder
	b.WriteString("<CompleteMultipartUpload>")
	for i := 1; i <= 10001; i++ {
		fmt.Fprintf(&b, "<Part><PartNumber>%d</PartNumber><ETag>\"e\"</ETag></Part>", i)
	}
	b.WriteString("</CompleteMultipartUpload>")
	status, code := f.raw(t, http.MethodPost, "k?uploadId=u", int64(b.Len()), strings.NewReader(b.String()))
	if status != http.StatusBadRequest || code != "InvalidArgument" {
		t.Errorf("completion of 10,001 parts: %d %s", status, code)
	}
	f.refusedRaw(t, "10001 parts")
}
