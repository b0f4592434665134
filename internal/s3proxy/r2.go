package s3proxy

import (
	"fmt"
	"io"
	"net/http"
	"strings"
)

// R2 rules mode refuses what Cloudflare R2 refuses, with the error R2 sends
// where it is known. The rules and where each comes from:
//
//	Rule                                                     Answer
//	Expect: 100-continue                                     400 InvalidRequest [100]
//	object key over 1,024 bytes                              400 KeyTooLongError [lim]
//	Content-MD5 with an x-amz-checksum-<alg> header,         400 InvalidRequest "You can only specify
//	  or two x-amz-checksum-<alg> headers                        one non-default checksum at a time." [md5]
//	checksum algorithm other than CRC32, CRC32C, CRC64NVME,  501 NotImplemented [cks] [ni]
//	  SHA1, SHA256 (header or x-amz-(sdk-)checksum-algorithm)
//	PutObject over 5 GiB - 5 MiB                             400 EntityTooLarge [lim]
//	CreateMultipartUpload: CRC32, CRC32C, SHA1 or SHA256     501 NotImplemented [cks] [ni]
//	  with x-amz-checksum-type FULL_OBJECT; CRC64NVME with
//	  COMPOSITE
//	UploadPart: part number outside 1..10,000                400 InvalidArgument [mp]
//	UploadPart: part over 5 GiB                              400 EntityTooLarge [mp]
//	UploadPart: x-amz-checksum-crc64nvme on an upload not    501 NotImplemented [cks] [ni]
//	  created as CRC64NVME (that would be a composite one)
//	CompleteMultipartUpload: x-amz-checksum-type FULL_OBJECT 501 NotImplemented [cks] [ni]
//	  with a CRC32, CRC32C, SHA1 or SHA256 checksum, or
//	  COMPOSITE with CRC64NVME
//	CompleteMultipartUpload: a non-final part under 5 MiB    400 EntityTooSmall [mp]
//	CompleteMultipartUpload: non-final parts of unequal      400 InvalidPart "All non-trailing parts
//	  size, or a final part larger than the others               must have the same length." [mp] [err]
//	PutObject, CopyObject or CompleteMultipartUpload to a    429 TooManyRequests "Reduce your concurrent
//	  key with a write in flight or one let through less         request rate for the same object." [rate]
//	  than Config.R2KeyWriteInterval (default 1 s) before;       Not a violation: recorded as Throttled
//	  a write answered 412 counts [cond] (r2_rate.go)            (R2 answers any racing writer so)
//
// PutObject accepts a checksum of any of the five algorithms: checksum types
// (full object or composite) describe multipart uploads only.
//
// Sources (checked 2026):
//
//	[mp]   developers.cloudflare.com/r2/objects/multipart-objects/ ("Limitations"): parts of
//	       5 MiB to 5 GiB; all parts except the last the same size; the last no larger than the
//	       others; at most 10,000 parts. Error codes for part numbers and sizes are S3's; R2's
//	       own are not documented.
//	[err]  R2's answer to such a completion, HTTP 400 InvalidPart "All non-trailing parts must
//	       have the same length.": github.com/tus/tusd/issues/1137,
//	       github.com/apache/opendal/issues/2904 (with the 400), github.com/apache/beam/issues/29005.
//	       R2 says nothing of its own for a final part larger than the others; it gets the same.
//	[cks]  developers.cloudflare.com/r2/api/s3/api/ ("Checksum Types"; cloudflare-docs
//	       src/content/docs/r2/api/s3/api.mdx): CRC64NVME is FULL_OBJECT only; CRC32, CRC32C,
//	       SHA1 and SHA256 are COMPOSITE only. No other algorithm is listed.
//	[ni]   501 NotImplemented "Header 'x-amz-checksum-crc32' with value '...' not implemented" is
//	       what R2 answered for checksum headers it did not implement (github.com/f2face/
//	       cloudflare-r2/issues/12, github.com/cloudflare/cloudflare-docs/pull/19236). R2's
//	       answer to the combinations [cks] rules out is not documented; this is our guess.
//	[md5]  github.com/vectordotdev/vector/issues/23029 and pull/25803: R2 refuses Content-MD5
//	       together with x-amz-checksum-crc32 with that 400.
//	[100]  developers.cloudflare.com/r2/api/s3/extensions/: "Cloudflare does not support the
//	       HTTP 100 response." R2 does not refuse the header; a client waiting for 100 Continue
//	       just stalls. The proxy refuses it so that the mistake is loud.
//	[lim]  developers.cloudflare.com/r2/reference/limits/: object keys up to 1,024 bytes; a
//	       single PUT up to 5 GiB - 5 MiB.
//	[rate] developers.cloudflare.com/r2/platform/limits/: "Maximum concurrent writes to the same
//	       object name (key): 1 per second"; higher rates get HTTP 429. developers.cloudflare.com/
//	       r2/api/error-codes/ (cloudflare-docs src/content/docs/r2/api/error-codes.mdx): error
//	       10058, S3 code TooManyRequests, HTTP 429, "often caused by multiple concurrent requests
//	       to the same object key (limit: 1 write/second per key)". The message is the one R2's
//	       Workers API sends with 10058 ("put: Reduce your concurrent request rate for the same
//	       object. (10058)", quoted by public code that met it); the S3 API's wording is not
//	       documented, and one public report saw it with the code ServiceUnavailable: clients
//	       should go by the 429. Which operations count is our reading: the limit names writes,
//	       so PutObject, CopyObject and CompleteMultipartUpload; deletes are not counted.
//	[cond] A conditional write answered 412 still reached the key and is billed as a write
//	       (../shared/R2-NOTES.md); R2 does not document whether its limiter counts it. We count
//	       it, the stricter choice: losers of a create-only race keep the key busy too.
//
// Part sizes are those of the UploadPart requests the server accepted
// through this proxy (x-amz-decoded-content-length for aws-chunked bodies).
// A completion that names a part the proxy did not see is not size-checked.
const (
	r2MinPartSize  = 5 << 20
	r2MaxPartSize  = 5 << 30
	r2MaxParts     = 10000
	r2MaxSinglePut = 5<<30 - 5<<20
	r2MaxKeyBytes  = 1024
	// maxCompleteBody bounds the CompleteMultipartUpload body read: 10,000
	// parts with checksums take about 2 MB.
	maxCompleteBody = 16 << 20
	// maxCreateResponse bounds the CreateMultipartUpload answer read.
	maxCreateResponse = 1 << 20
	// maxDrain bounds the body read from a refused request.
	maxDrain = 64 << 20
)

// r2Algorithms are the checksum algorithms R2 knows, with whether it takes
// them as full-object (true) or composite (false) multipart checksums [cks].
var r2Algorithms = map[string]bool{
	"CRC64NVME": true,
	"CRC32":     false,
	"CRC32C":    false,
	"SHA1":      false,
	"SHA256":    false,
}

// r2NonTrailing is R2's message for unequal parts [err].
const r2NonTrailing = "All non-trailing parts must have the same length."

// upload is what the R2 rules track of one multipart upload.
type upload struct {
	algorithm string // upper case; "" when none was declared or the creation was not seen
	parts     map[int32]int64
}

// violation is an R2 rule a request breaks.
type violation struct {
	status        int
	code, message string
	// detail says exactly what was wrong, for Request.Rejected and logs.
	detail string
}

func refusal(status int, code, message, detail string, args ...any) *violation {
	return &violation{status: status, code: code, message: message, detail: fmt.Sprintf(detail, args...)}
}

// drainBody reads a request body of ordinary size before the proxy
// answers without forwarding, so that the client reads the answer rather
// than failing to send the rest and retrying. Huge ones (refused for their
// size) and those waiting for 100 Continue are left unread; Go then closes
// the connection after the answer.
func drainBody(ex *exchange) {
	if n := ex.r.ContentLength; n > 0 && n <= maxDrain && ex.r.Header.Get("Expect") == "" {
		_, _ = io.Copy(io.Discard, io.LimitReader(ex.r.Body, maxDrain))
	}
}

// refuse answers a request that breaks an R2 rule and records it.
func (p *Proxy) refuse(ex *exchange, v *violation) {
	drainBody(ex)
	p.mu.Lock()
	ex.rec.Rejected = v.detail
	p.violations = append(p.violations, ex.rec)
	p.mu.Unlock()
	uri := ex.r.URL.RequestURI()
	if len(uri) > 300 {
		uri = uri[:300] + "..."
	}
	p.logf("s3proxy: R2 rules refused %s %s %s: %s", ex.op, ex.r.Method, uri, v.detail)
	p.writeError(ex, v.status, v.code, v.message)
}

// checksumHeaders returns the algorithms of the x-amz-checksum-<alg> value
// headers of h, upper case, and the value of each.
func checksumHeaders(h http.Header) map[string]string {
	algs := map[string]string{}
	for k, vv := range h {
		alg, ok := strings.CutPrefix(strings.ToLower(k), "x-amz-checksum-")
		if !ok {
			continue
		}
		switch alg {
		case "mode", "type", "algorithm":
			continue // not checksum values
		}
		algs[strings.ToUpper(alg)] = strings.Join(vv, ",")
	}
	return algs
}

func notImplemented(header, value, detail string, args ...any) *violation {
	return refusal(http.StatusNotImplemented, "NotImplemented",
		fmt.Sprintf("Header '%s' with value '%s' not implemented", header, value), detail, args...)
}

// r2Check returns the R2 rule the request breaks, or nil. For
// CompleteMultipartUpload it reads the body into ex.body.
func (p *Proxy) r2Check(ex *exchange) *violation {
	r, h := ex.r, ex.r.Header
	if strings.EqualFold(strings.TrimSpace(h.Get("Expect")), "100-continue") {
		return refusal(http.StatusBadRequest, "InvalidRequest", "R2 does not support Expect: 100-continue",
			"Expect: 100-continue (R2 never sends 100 Continue)")
	}
	if len(ex.tg.key) > r2MaxKeyBytes {
		return refusal(http.StatusBadRequest, "KeyTooLongError", "Your key is too long",
			"key of %d bytes, R2 allows %d", len(ex.tg.key), r2MaxKeyBytes)
	}
	if v := checkChecksumHeaders(h); v != nil {
		return v
	}
	switch ex.op {
	case OpPutObject:
		if r.ContentLength > r2MaxSinglePut {
			return refusal(http.StatusBadRequest, "EntityTooLarge", "Your proposed upload exceeds the maximum allowed object size.",
				"PutObject of %d bytes, R2 allows %d in one PUT", r.ContentLength, int64(r2MaxSinglePut))
		}
	case OpCreateMultipartUpload:
		return checkCreateChecksum(h)
	case OpUploadPart:
		return p.checkUploadPart(ex)
	case OpCompleteMultipartUpload:
		return p.checkComplete(ex)
	}
	return nil
}

// checkChecksumHeaders applies the rules every request shares [md5] [cks].
func checkChecksumHeaders(h http.Header) *violation {
	algs := checksumHeaders(h)
	for alg, val := range algs {
		if _, ok := r2Algorithms[alg]; !ok {
			return notImplemented("x-amz-checksum-"+strings.ToLower(alg), val,
				"checksum algorithm %s is not one R2 supports", alg)
		}
	}
	for _, name := range []string{"X-Amz-Sdk-Checksum-Algorithm", "X-Amz-Checksum-Algorithm"} {
		if alg := h.Get(name); alg != "" {
			if _, ok := r2Algorithms[strings.ToUpper(alg)]; !ok {
				return notImplemented(strings.ToLower(name), alg, "%s %s is not an algorithm R2 supports", name, alg)
			}
		}
	}
	const oneChecksum = "You can only specify one non-default checksum at a time."
	if md5 := h.Get("Content-Md5"); md5 != "" && len(algs) > 0 {
		return refusal(http.StatusBadRequest, "InvalidRequest", oneChecksum,
			"Content-MD5 together with x-amz-checksum-%s", strings.ToLower(firstKey(algs)))
	}
	if len(algs) > 1 {
		return refusal(http.StatusBadRequest, "InvalidRequest", oneChecksum,
			"%d x-amz-checksum-* headers in one request", len(algs))
	}
	return nil
}

func firstKey(m map[string]string) string {
	for k := range m {
		return k
	}
	return ""
}

// checkCreateChecksum checks a multipart upload's declared checksum
// algorithm and type against R2's table [cks].
func checkCreateChecksum(h http.Header) *violation {
	alg := strings.ToUpper(h.Get("X-Amz-Checksum-Algorithm"))
	typ := strings.ToUpper(h.Get("X-Amz-Checksum-Type"))
	if alg == "" || typ == "" {
		return nil // S3's default type is the one R2 supports for each algorithm
	}
	if full := r2Algorithms[alg]; full != (typ == "FULL_OBJECT") {
		return notImplemented("x-amz-checksum-type", typ,
			"CreateMultipartUpload with %s checksums of type %s; R2 takes %s only as %s", alg, typ, alg, typeName(full))
	}
	return nil
}

func typeName(full bool) string {
	if full {
		return "FULL_OBJECT"
	}
	return "COMPOSITE"
}
