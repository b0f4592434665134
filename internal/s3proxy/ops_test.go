package s3proxy

import (
	"net/http"
	"net/url"
	"testing"
)

func TestClassify(t *testing.T) {
	for _, c := range []struct {
		method, uri string
		header      map[string]string
		want        string
	}{
		{"GET", "/", nil, OpListBuckets},
		{"PUT", "/b", nil, OpCreateBucket},
		{"PUT", "/b/", nil, OpCreateBucket},
		{"DELETE", "/b", nil, OpDeleteBucket},
		{"HEAD", "/b", nil, OpHeadBucket},
		{"GET", "/b?list-type=2&prefix=run%2F&max-keys=1", nil, OpListObjectsV2},
		{"GET", "/b?prefix=x", nil, OpListObjects},
		{"GET", "/b?uploads&prefix=x", nil, OpListMultipartUploads},
		{"GET", "/b?location", nil, "GET"},
		{"POST", "/b?delete", nil, OpDeleteObjects},
		{"PUT", "/b/k", nil, OpPutObject},
		{"PUT", "/b/dir/k%20x", map[string]string{"X-Amz-Copy-Source": "/b/y"}, OpCopyObject},
		{"GET", "/b/k", nil, OpGetObject},
		{"HEAD", "/b/k", nil, OpHeadObject},
		{"DELETE", "/b/k", nil, OpDeleteObject},
		{"POST", "/b/k?uploads", nil, OpCreateMultipartUpload},
		{"PUT", "/b/k?partNumber=3&uploadId=abc", nil, OpUploadPart},
		{"PUT", "/b/k?partNumber=3&uploadId=abc", map[string]string{"X-Amz-Copy-Source": "/b/y"}, OpUploadPartCopy},
		{"POST", "/b/k?uploadId=abc", nil, OpCompleteMultipartUpload},
		{"DELETE", "/b/k?uploadId=abc", nil, OpAbortMultipartUpload},
		{"GET", "/b/k?uploadId=abc&part-number-marker=2", nil, OpListParts},
		{"GET", "/b/k?partNumber=2", nil, OpGetObject},
	} {
		u, err := url.ParseRequestURI(c.uri)
		if err != nil {
			t.Fatal(err)
		}
		h := http.Header{}
		for k, v := range c.header {
			h.Set(k, v)
		}
		if got := classify(c.method, parseTarget(u.EscapedPath()), u.Query(), h); got != c.want {
			t.Errorf("%s %s = %s, want %s", c.method, c.uri, got, c.want)
		}
	}
}

func TestParseTarget(t *testing.T) {
	for _, c := range []struct {
		raw, bucket, key string
		object           bool
	}{
		{"/", "", "", false},
		{"/b", "b", "", false},
		{"/b/", "b", "", false},
		{"/b/run/data/x.pt", "b", "run/data/x.pt", true},
		{"/b/a%20b%2Bc/%C3%A9", "b", "a b+c/é", true},
	} {
		got := parseTarget(c.raw)
		if got.bucket != c.bucket || got.key != c.key || got.object != c.object {
			t.Errorf("parseTarget(%q) = %+v, want %q %q %v", c.raw, got, c.bucket, c.key, c.object)
		}
	}
}
