package s3proxy

import (
	"net/http"
	"strings"
	"testing"
)

func TestCheckPartSizes(t *testing.T) {
	const m = 1 << 20
	for _, c := range []struct {
		sizes []int64
		want  string // code, "" for accepted
	}{
		{[]int64{1}, ""},
		{[]int64{5 * m, 5 * m, 1}, ""},
		{[]int64{5 * m, 5 * m, 5 * m}, ""},
		{[]int64{8 * m, 8 * m, 3 * m}, ""},
		{[]int64{1 * m, 1}, "EntityTooSmall"},
		{[]int64{5 * m, 6 * m, 1}, "InvalidPart"},
		{[]int64{6 * m, 5 * m, 1}, "InvalidPart"},
		{[]int64{5 * m, 5*m + 1}, "InvalidPart"},
	} {
		var body completeBody
		for i := range c.sizes {
			body.Parts = append(body.Parts, struct {
				PartNumber int32 `xml:"PartNumber"`
			}{int32(i + 1)})
		}
		v := checkPartSizes(body, c.sizes)
		got := ""
		if v != nil {
			got = v.code
		}
		if got != c.want {
			t.Errorf("sizes %v: got %q (%v), want %q", c.sizes, got, v, c.want)
		}
	}
}

func TestPartSize(t *testing.T) {
	r, _ := http.NewRequest("PUT", "http://x/b/k?partNumber=1&uploadId=u", strings.NewReader("xxxx"))
	if got := partSize(r, 9); got != 4 {
		t.Errorf("Content-Length body: %d", got)
	}
	r.Header.Set("X-Amz-Decoded-Content-Length", "3")
	if got := partSize(r, 9); got != 3 {
		t.Errorf("aws-chunked body: %d, want the decoded length 3", got)
	}
	r.Header.Del("X-Amz-Decoded-Content-Length")
	r.ContentLength = -1
	if got := partSize(r, 9); got != 9 {
		t.Errorf("chunked body: %d, want the 9 bytes counted", got)
	}
}

func TestChecksumHeaderRules(t *testing.T) {
	for _, c := range []struct {
		headers map[string]string
		want    string
	}{
		{map[string]string{"X-Amz-Checksum-Crc32c": "AAAAAA=="}, ""},
		{map[string]string{"Content-MD5": "1B2M2Y8AsgTpgAmY7PhCfg=="}, ""},
		{map[string]string{"X-Amz-Checksum-Mode": "ENABLED"}, ""},
		{map[string]string{"Content-MD5": "1B2M2Y8AsgTpgAmY7PhCfg==", "X-Amz-Checksum-Crc32": "AAAAAA=="}, "InvalidRequest"},
		{map[string]string{"X-Amz-Checksum-Crc32": "AAAAAA==", "X-Amz-Checksum-Sha1": "x"}, "InvalidRequest"},
		{map[string]string{"X-Amz-Checksum-Sha512": "x"}, "NotImplemented"},
		{map[string]string{"X-Amz-Sdk-Checksum-Algorithm": "MD5"}, "NotImplemented"},
	} {
		h := http.Header{}
		for k, v := range c.headers {
			h.Set(k, v)
		}
		v := checkChecksumHeaders(h)
		got := ""
		if v != nil {
			got = v.code
		}
		if got != c.want {
			t.Errorf("%v: got %q (%v), want %q", c.headers, got, v, c.want)
		}
	}
}
