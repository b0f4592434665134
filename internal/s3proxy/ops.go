package s3proxy

import (
	"net/http"
	"net/url"
	"strings"
)

// Operation names, as the S3 API reference and the SDKs spell them. Requests
// the proxy cannot name are counted under their HTTP method.
const (
	OpListBuckets             = "ListBuckets"
	OpCreateBucket            = "CreateBucket"
	OpDeleteBucket            = "DeleteBucket"
	OpHeadBucket              = "HeadBucket"
	OpListObjects             = "ListObjects"
	OpListObjectsV2           = "ListObjectsV2"
	OpListMultipartUploads    = "ListMultipartUploads"
	OpDeleteObjects           = "DeleteObjects"
	OpPutObject               = "PutObject"
	OpCopyObject              = "CopyObject"
	OpGetObject               = "GetObject"
	OpHeadObject              = "HeadObject"
	OpDeleteObject            = "DeleteObject"
	OpCreateMultipartUpload   = "CreateMultipartUpload"
	OpUploadPart              = "UploadPart"
	OpUploadPartCopy          = "UploadPartCopy"
	OpCompleteMultipartUpload = "CompleteMultipartUpload"
	OpAbortMultipartUpload    = "AbortMultipartUpload"
	OpListParts               = "ListParts"
)

// target is what a path-style request addresses.
type target struct {
	bucket, key string
	object      bool // the path names an object, not a bucket or the service
}

// parseTarget splits a path-style request path (/bucket/key) into bucket and
// key. rawPath is the path as the client sent it, still escaped.
// Virtual-hosted requests (bucket in the Host) are not told apart: ferry's
// tests always use path style.
func parseTarget(rawPath string) target {
	p := strings.TrimPrefix(rawPath, "/")
	bucket, rawKey, hasSlash := strings.Cut(p, "/")
	if b, err := url.PathUnescape(bucket); err == nil {
		bucket = b
	}
	key := rawKey
	if k, err := url.PathUnescape(rawKey); err == nil {
		key = k
	}
	return target{bucket: bucket, key: key, object: hasSlash && rawKey != ""}
}

// classify names the S3 operation of a path-style request from its method,
// path, query and headers.
func classify(method string, tg target, q url.Values, h http.Header) string {
	switch {
	case tg.bucket == "":
		if method == http.MethodGet {
			return OpListBuckets
		}
		return method
	case !tg.object:
		return classifyBucket(method, q)
	}
	switch method {
	case http.MethodPut:
		switch {
		case q.Has("partNumber") && q.Has("uploadId") && h.Get("X-Amz-Copy-Source") != "":
			return OpUploadPartCopy
		case q.Has("partNumber") && q.Has("uploadId"):
			return OpUploadPart
		case h.Get("X-Amz-Copy-Source") != "":
			return OpCopyObject
		}
		return OpPutObject
	case http.MethodPost:
		switch {
		case q.Has("uploads"):
			return OpCreateMultipartUpload
		case q.Has("uploadId"):
			return OpCompleteMultipartUpload
		}
	case http.MethodGet:
		if q.Has("uploadId") {
			return OpListParts
		}
		return OpGetObject
	case http.MethodHead:
		return OpHeadObject
	case http.MethodDelete:
		if q.Has("uploadId") {
			return OpAbortMultipartUpload
		}
		return OpDeleteObject
	}
	return method
}

func classifyBucket(method string, q url.Values) string {
	switch method {
	case http.MethodPut:
		if len(q) == 0 {
			return OpCreateBucket
		}
	case http.MethodDelete:
		if len(q) == 0 {
			return OpDeleteBucket
		}
	case http.MethodHead:
		return OpHeadBucket
	case http.MethodPost:
		if q.Has("delete") {
			return OpDeleteObjects
		}
	case http.MethodGet:
		switch {
		case q.Has("uploads"):
			return OpListMultipartUploads
		case q.Get("list-type") == "2":
			return OpListObjectsV2
		case !hasSubresource(q):
			return OpListObjects
		}
	}
	return method
}

// hasSubresource reports whether q names a bucket sub-resource (?cors,
// ?location...) rather than only carrying listing parameters.
func hasSubresource(q url.Values) bool {
	for k := range q {
		switch k {
		case "prefix", "delimiter", "marker", "max-keys", "encoding-type":
		default:
			return true
		}
	}
	return false
}
