package s3proxy

import (
	"bytes"
	"encoding/xml"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// checkUploadPart checks the part number, size and checksum of a part.
func (p *Proxy) checkUploadPart(ex *exchange) *violation {
	n, err := strconv.Atoi(ex.q.Get("partNumber"))
	if err != nil || n < 1 || n > r2MaxParts {
		return refusal(http.StatusBadRequest, "InvalidArgument",
			"Part number must be an integer between 1 and 10000, inclusive",
			"part number %q outside 1..%d", ex.q.Get("partNumber"), r2MaxParts)
	}
	if size := partSize(ex.r, -1); size > r2MaxPartSize {
		return refusal(http.StatusBadRequest, "EntityTooLarge", "Your proposed upload exceeds the maximum allowed object size.",
			"part %d of %d bytes, R2 allows %d", n, size, int64(r2MaxPartSize))
	}
	if v, ok := checksumHeaders(ex.r.Header)["CRC64NVME"]; ok {
		p.mu.Lock()
		up := p.uploads[ex.q.Get("uploadId")]
		p.mu.Unlock()
		if up != nil && up.algorithm != "CRC64NVME" {
			return notImplemented("x-amz-checksum-crc64nvme", v,
				"part %d carries a CRC64NVME checksum for an upload created with %q: that is a composite CRC64NVME checksum", n, up.algorithm)
		}
	}
	return nil
}

// partSize is the size of an UploadPart body: the decoded length of an
// aws-chunked body, else Content-Length, else sent (bytes counted).
func partSize(r *http.Request, sent int64) int64 {
	if v := r.Header.Get("X-Amz-Decoded-Content-Length"); v != "" {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			return n
		}
	}
	if r.ContentLength >= 0 {
		return r.ContentLength
	}
	return sent
}

// completeBody is the part of a CompleteMultipartUpload body the rules use.
type completeBody struct {
	Parts []struct {
		PartNumber int32 `xml:"PartNumber"`
	} `xml:"Part"`
}

// checkComplete checks the completion's checksum headers and the sizes of
// the parts it names.
func (p *Proxy) checkComplete(ex *exchange) *violation {
	h := ex.r.Header
	typ := strings.ToUpper(h.Get("X-Amz-Checksum-Type"))
	for alg, val := range checksumHeaders(h) {
		if typ != "" && r2Algorithms[alg] != (typ == "FULL_OBJECT") {
			return notImplemented("x-amz-checksum-"+strings.ToLower(alg), val,
				"CompleteMultipartUpload with a %s checksum of type %s; R2 takes %s only as %s", alg, typ, alg, typeName(r2Algorithms[alg]))
		}
	}
	b, err := io.ReadAll(io.LimitReader(ex.r.Body, maxCompleteBody))
	if err != nil {
		return nil // the client is gone; forwarding fails too
	}
	ex.body = b
	var body completeBody
	if err := xml.Unmarshal(b, &body); err != nil {
		return nil // malformed: the server answers MalformedXML
	}
	p.mu.Lock()
	up := p.uploads[ex.q.Get("uploadId")]
	var sizes []int64
	if up != nil {
		sizes = make([]int64, 0, len(body.Parts))
		for _, part := range body.Parts {
			size, ok := up.parts[part.PartNumber]
			if !ok {
				sizes = nil // a part the proxy did not see: no size check
				break
			}
			sizes = append(sizes, size)
		}
	}
	p.mu.Unlock()
	if len(body.Parts) > r2MaxParts {
		return refusal(http.StatusBadRequest, "InvalidArgument", "Too many parts",
			"%d parts, R2 allows %d", len(body.Parts), r2MaxParts)
	}
	return checkPartSizes(body, sizes)
}

// checkPartSizes applies R2's part size rules [mp] [err] to the parts of a
// completion, in the order given.
func checkPartSizes(body completeBody, sizes []int64) *violation {
	if len(sizes) < 2 {
		return nil
	}
	last := len(sizes) - 1
	for i := range last {
		if sizes[i] < r2MinPartSize {
			return refusal(http.StatusBadRequest, "EntityTooSmall",
				"Your proposed upload is smaller than the minimum allowed object size.",
				"non-final part %d is %d bytes, under R2's minimum of %d", body.Parts[i].PartNumber, sizes[i], r2MinPartSize)
		}
		if sizes[i] != sizes[0] {
			return refusal(http.StatusBadRequest, "InvalidPart", r2NonTrailing,
				"non-final part %d is %d bytes but part %d is %d", body.Parts[i].PartNumber, sizes[i], body.Parts[0].PartNumber, sizes[0])
		}
	}
	if sizes[last] > sizes[0] {
		return refusal(http.StatusBadRequest, "InvalidPart", r2NonTrailing,
			"final part %d is %d bytes, larger than the other parts' %d", body.Parts[last].PartNumber, sizes[last], sizes[0])
	}
	return nil
}

// r2Observe updates what the rules track from a response of the server:
// uploads created, parts stored, uploads ended. sent is the number of body
// bytes forwarded.
func (p *Proxy) r2Observe(ex *exchange, resp *http.Response, sent int64) {
	ok := resp.StatusCode >= 200 && resp.StatusCode < 300
	id := ex.q.Get("uploadId")
	switch {
	case ex.op == OpCreateMultipartUpload && ok:
		b, err := io.ReadAll(io.LimitReader(resp.Body, maxCreateResponse))
		resp.Body = readCloser{Reader: io.MultiReader(bytes.NewReader(b), resp.Body), Closer: resp.Body}
		if err != nil {
			return
		}
		var out struct {
			UploadID string `xml:"UploadId"`
		}
		if xml.Unmarshal(b, &out) != nil || out.UploadID == "" {
			return
		}
		p.mu.Lock()
		p.uploads[out.UploadID] = &upload{
			algorithm: strings.ToUpper(ex.r.Header.Get("X-Amz-Checksum-Algorithm")),
			parts:     map[int32]int64{},
		}
		p.mu.Unlock()
	case ex.op == OpUploadPart && ok:
		n, err := strconv.Atoi(ex.q.Get("partNumber"))
		if err != nil {
			return
		}
		p.mu.Lock()
		up := p.uploads[id]
		if up == nil {
			up = &upload{parts: map[int32]int64{}}
			p.uploads[id] = up
		}
		up.parts[int32(n)] = partSize(ex.r, sent)
		p.mu.Unlock()
	case (ex.op == OpCompleteMultipartUpload && ok) ||
		(ex.op == OpAbortMultipartUpload && (ok || resp.StatusCode == http.StatusNotFound)):
		p.mu.Lock()
		delete(p.uploads, id)
		p.mu.Unlock()
	}
}

type readCloser struct {
	io.Reader
	io.Closer
}
