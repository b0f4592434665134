package s3store_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
)

// fault is what the proxy does to one request instead of forwarding it.
type fault struct {
	status int    // answer with this status and error code
	code   string // S3 error code
	cut    bool   // read part of the body, then drop the connection
	lose   bool   // forward the request, then drop the connection
}

// recorded is one request seen by the proxy.
type recorded struct {
	op     string
	header http.Header
	body   string // for small requests (not object data)
}

// proxy forwards to a real server, records requests and injects faults, to
// check what goes on the wire and that failures are retried.
type proxy struct {
	*httptest.Server
	rp *httputil.ReverseProxy

	mu     sync.Mutex
	faults map[string][]fault
	seen   []recorded
}

func newProxy(t *testing.T, target string) *proxy {
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{faults: map[string][]fault{}}
	p.rp = &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
		pr.SetURL(u)
		// The Host header is signed: keep the one the client signed.
		pr.Out.Host = pr.In.Host
	}}
	p.Server = httptest.NewServer(p)
	t.Cleanup(p.Close)
	return p
}

// inject queues faults for the next requests of operation op.
func (p *proxy) inject(op string, fs ...fault) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.faults[op] = append(p.faults[op], fs...)
}

// requests returns the recorded requests of operation op.
func (p *proxy) requests(op string) []recorded {
	p.mu.Lock()
	defer p.mu.Unlock()
	var rs []recorded
	for _, r := range p.seen {
		if r.op == op {
			rs = append(rs, r)
		}
	}
	return rs
}

// opOf names the S3 operation of a path-style request.
func opOf(r *http.Request) string {
	q := r.URL.Query()
	objectKey := strings.Count(strings.Trim(r.URL.Path, "/"), "/") >= 1
	switch r.Method {
	case http.MethodPut:
		if q.Has("partNumber") {
			return "UploadPart"
		}
		if !objectKey {
			return "CreateBucket"
		}
		return "PutObject"
	case http.MethodPost:
		if q.Has("uploads") {
			return "CreateMultipartUpload"
		}
		return "CompleteMultipartUpload"
	case http.MethodGet:
		switch {
		case q.Has("uploadId"):
			return "ListParts"
		case q.Has("uploads"):
			return "ListMultipartUploads"
		case q.Get("list-type") == "2":
			return "ListObjectsV2"
		}
		return "GetObject"
	case http.MethodHead:
		if !objectKey {
			return "HeadBucket"
		}
		return "HeadObject"
	case http.MethodDelete:
		if q.Has("uploadId") {
			return "AbortMultipartUpload"
		}
		return "DeleteObject"
	}
	return r.Method
}

func (p *proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	op := opOf(r)
	rec := recorded{op: op, header: r.Header.Clone()}
	if op == "CompleteMultipartUpload" || op == "CreateMultipartUpload" {
		b, _ := io.ReadAll(r.Body)
		rec.body = string(b)
		r.Body = io.NopCloser(strings.NewReader(rec.body))
	}
	p.mu.Lock()
	p.seen = append(p.seen, rec)
	var f *fault
	if fs := p.faults[op]; len(fs) > 0 {
		f = &fs[0]
		p.faults[op] = fs[1:]
	}
	p.mu.Unlock()

	switch {
	case f == nil:
		p.rp.ServeHTTP(w, r)
	case f.lose:
		p.rp.ServeHTTP(httptest.NewRecorder(), r)
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
	case f.cut:
		_, _ = io.CopyN(io.Discard, r.Body, r.ContentLength/2)
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
	default:
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(f.status)
		fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>%s</Code><Message>injected</Message></Error>`, f.code)
	}
}
