package s3proxy

import (
	"bytes"
	"encoding/xml"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// exchange is one request on its way through the proxy.
type exchange struct {
	w       http.ResponseWriter
	r       *http.Request
	rec     *Request
	rawPath string
	op      string
	tg      target
	q       url.Values
	// body replaces r.Body when the proxy had to read it (R2 checks of
	// CompleteMultipartUpload).
	body []byte
}

// ServeHTTP implements http.Handler.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !p.enter() {
		http.Error(w, "s3proxy is closed", http.StatusServiceUnavailable)
		return
	}
	defer p.wg.Done()
	rawPath, _, _ := strings.Cut(r.RequestURI, "?")
	tg := parseTarget(rawPath)
	q := r.URL.Query()
	ex := &exchange{w: w, r: r, rawPath: rawPath, tg: tg, q: q}
	ex.op = classify(r.Method, tg, q, r.Header)
	ex.rec = p.record(ex.op, tg, r)

	if p.r2 {
		if v := p.r2Check(ex); v != nil {
			p.refuse(ex, v)
			return
		}
	}
	act := p.pick(ex.op, tg.key)
	if act.kind != actForward {
		p.update(ex.rec, func(rec *Request) { rec.Fault = act.String() })
		p.logf("s3proxy: %s %s: injecting %v", ex.op, r.URL.Path, act)
	}
	switch act.kind {
	case actStatus:
		_, _ = io.Copy(io.Discard, r.Body)
		p.writeError(ex, act.status, act.code, act.message)
	case actResetMidRequest:
		n := act.n
		if n < 0 {
			n = max(r.ContentLength/2, 0)
		}
		_, _ = io.CopyN(io.Discard, r.Body, n)
		p.reset(w)
	case actStall:
		conn := p.hijack(w)
		p.hold(act.d, nil)
		resetConn(conn)
	case actBarrier:
		t := time.NewTimer(act.d)
		defer t.Stop()
		select {
		case <-act.gate.arrive():
		case <-t.C:
		case <-p.closing:
		case <-r.Context().Done():
		}
		p.forward(ex, Action{})
	case actDelay:
		if !p.hold(act.d, r.Context().Done()) {
			panic(http.ErrAbortHandler) // drop the connection, answer nothing
		}
		p.forward(ex, Action{})
	default:
		p.forward(ex, act)
	}
}

// hold waits d, or until the proxy closes, or until done (when not nil) is
// closed. It reports whether d passed.
func (p *Proxy) hold(d time.Duration, done <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-p.closing:
		return false
	case <-done:
		return false
	}
}

// hopHeaders are connection-level headers a proxy must not pass on (RFC
// 9110 section 7.6.1). None of them is signed by SigV4.
var hopHeaders = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

func removeHopHeaders(h http.Header) {
	for _, f := range h.Values("Connection") {
		for _, name := range strings.Split(f, ",") {
			if name = strings.TrimSpace(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, name := range hopHeaders {
		h.Del(name)
	}
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n += int64(n)
	return n, err
}

func (c *countingReader) Close() error { return nil }

// forward sends the request to the server and the response back, applying
// act to the response.
func (p *Proxy) forward(ex *exchange, act Action) {
	r := ex.r
	// The per-key write rate applies to what reaches the server: after
	// the rules' delays and barriers, before the server sees the write.
	slot, v := p.admitWrite(ex)
	if v != nil {
		p.throttle(ex, v)
		return
	}
	out := r.Clone(r.Context())
	out.RequestURI = ""
	out.URL.Scheme, out.URL.Host = p.target.Scheme, p.target.Host
	// The path exactly as the client escaped it: the signature covers it.
	if !strings.HasPrefix(ex.rawPath, "//") {
		out.URL.Opaque = ex.rawPath
	}
	// The Host header too is signed: keep the client's (the proxy's address).
	out.Host = r.Host
	removeHopHeaders(out.Header)
	if act.kind == actIgnoreConditions && conditional(out.Header) {
		out.Header = out.Header.Clone()
		if err := p.dropConditions(ex, out); err != nil {
			p.settleWrite(slot, 0)
			p.writeError(ex, http.StatusInternalServerError, "InternalError", "s3proxy: "+err.Error())
			return
		}
	}
	var body io.Reader = r.Body
	if ex.body != nil {
		body = bytes.NewReader(ex.body)
	}
	counted := &countingReader{r: body}
	out.Body = counted
	if r.ContentLength == 0 {
		out.Body = nil
	}
	resp, err := p.transport.RoundTrip(out)
	if err != nil {
		p.settleWrite(slot, 0)
		if r.Context().Err() != nil {
			panic(http.ErrAbortHandler) // the client left; nobody to answer
		}
		p.writeError(ex, http.StatusBadGateway, "BadGateway", "s3proxy: "+err.Error())
		return
	}
	defer resp.Body.Close()
	p.settleWrite(slot, resp.StatusCode)
	if p.r2 {
		p.r2Observe(ex, resp, counted.n)
	}
	p.respond(ex, resp, act)
}

// respond copies resp to the client, applying act.
func (p *Proxy) respond(ex *exchange, resp *http.Response, act Action) {
	if act.kind == actResetBeforeResponse {
		_, _ = io.Copy(io.Discard, resp.Body)
		p.reset(ex.w)
		return
	}
	h := ex.w.Header()
	for k, vv := range resp.Header {
		h[k] = vv
	}
	removeHopHeaders(h)
	var body io.Reader = resp.Body
	switch act.kind {
	case actTruncate:
		if resp.ContentLength < 0 || act.n < resp.ContentLength {
			h.Set("Content-Length", strconv.FormatInt(act.n, 10))
			body = io.LimitReader(resp.Body, act.n)
		}
	case actFlipByte:
		body = &flipReader{r: resp.Body, at: act.n}
	}
	ex.w.WriteHeader(resp.StatusCode)
	p.update(ex.rec, func(rec *Request) { rec.Status = resp.StatusCode })
	switch act.kind {
	case actResetMidResponse, actStallMidResponse:
		_, _ = io.CopyN(ex.w, body, act.n)
		if f, ok := ex.w.(http.Flusher); ok {
			f.Flush()
		}
		conn := p.hijack(ex.w)
		if act.kind == actStallMidResponse {
			p.hold(act.d, nil)
		}
		resetConn(conn)
		return
	case actTrickle:
		p.trickle(ex.w, body, act.n)
		return
	}
	_, _ = io.Copy(ex.w, body)
}

// trickle sends body at about rate bytes/s, flushing each piece, until the
// body ends, the client leaves or the proxy closes.
func (p *Proxy) trickle(w http.ResponseWriter, body io.Reader, rate int64) {
	const perSecond = 10
	piece := max(rate/perSecond, 1)
	f, _ := w.(http.Flusher)
	for {
		n, err := io.CopyN(w, body, piece)
		if f != nil {
			f.Flush()
		}
		if err != nil || n < piece {
			return
		}
		if !p.hold(time.Second/perSecond, nil) {
			return
		}
	}
}

// hijack takes over the client connection. Without a hijackable connection
// it aborts the handler, which also drops the connection.
func (p *Proxy) hijack(w http.ResponseWriter) net.Conn {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic(http.ErrAbortHandler)
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	return conn
}

// reset resets the client connection now.
func (p *Proxy) reset(w http.ResponseWriter) { resetConn(p.hijack(w)) }

// resetConn closes c with a TCP RST rather than a FIN, as a crashed server
// or a middlebox dropping state would.
func resetConn(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// flipReader inverts the byte at offset at of the stream.
type flipReader struct {
	r   io.Reader
	at  int64
	pos int64
}

func (f *flipReader) Read(b []byte) (int, error) {
	n, err := f.r.Read(b)
	if f.at >= f.pos && f.at < f.pos+int64(n) {
		b[f.at-f.pos] ^= 0xff
	}
	f.pos += int64(n)
	return n, err
}

// s3Error is the XML body of an S3 error response.
type s3Error struct {
	XMLName  xml.Name `xml:"Error"`
	Code     string   `xml:"Code"`
	Message  string   `xml:"Message"`
	Resource string   `xml:"Resource,omitempty"`
}

// writeError answers with an S3 error. The X-S3proxy header tells a reader
// of the response that the proxy, not the server, wrote it.
func (p *Proxy) writeError(ex *exchange, status int, code, msg string) {
	body, _ := xml.Marshal(s3Error{Code: code, Message: msg, Resource: ex.r.URL.Path})
	body = append([]byte(xml.Header), body...)
	h := ex.w.Header()
	h.Set("Content-Type", "application/xml")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("X-S3proxy", "injected")
	ex.w.WriteHeader(status)
	if ex.r.Method != http.MethodHead {
		_, _ = ex.w.Write(body)
	}
	p.update(ex.rec, func(rec *Request) { rec.Status = status })
}
