// Package s3proxy is a reverse proxy for tests that sits between an S3
// client and a real S3 server (versitygw in ferry's tests). It counts and
// records every request by S3 operation; it injects the faults a test asks
// for (error statuses, connection resets before, during and after a
// request, delays, stalls, truncated or corrupted bodies); and in R2 rules
// mode it refuses what Cloudflare R2 refuses (see r2.go) and answers 429 to
// writes to one key faster than R2 allows (r2_rate.go), so that R2
// compatibility is tested without R2.
//
// Requests are forwarded unchanged, Host header and escaping included, so
// SigV4 signatures made for the proxy's address still verify at the server.
// Only path-style requests (http://host/bucket/key) are understood.
package s3proxy

import (
	"errors"
	"fmt"
	"maps"
	"math/rand"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultMaxRecords bounds the requests a Proxy records when
// Config.MaxRecords is zero; counts go on beyond it.
const DefaultMaxRecords = 100000

// Config sets up a Proxy.
type Config struct {
	// Rules are the faults to inject; SetRules replaces them later.
	Rules []Rule
	// R2Rules refuses requests that Cloudflare R2 refuses (see r2.go).
	R2Rules bool
	// R2KeyWriteInterval is the least time R2 rules mode lets pass between
	// two writes to one key; a write sooner is answered 429 (see
	// r2_rate.go). Zero means DefaultR2KeyWriteInterval (1 s, R2's limit);
	// tests shorten it; negative turns the rule off.
	R2KeyWriteInterval time.Duration
	// Seed seeds the source Rule.Probability draws from; 0 picks a seed from
	// the clock. Proxy.Seed reports it, for the test log.
	Seed int64
	// Transport carries requests to the server. Nil means a transport of
	// its own, without environment proxies or added compression.
	Transport http.RoundTripper
	// MaxRecords bounds the requests recorded (default DefaultMaxRecords).
	MaxRecords int
	// Logf, when set, receives a line for every fault injected and every
	// request refused by the R2 rules.
	Logf func(format string, args ...any)
	// Credentials sign the requests an action changes (IgnoreConditions).
	Credentials Credentials
}

// Request is what the proxy saw of one request and did with it.
type Request struct {
	// Seq numbers requests from 1 in their order of arrival.
	Seq    int
	Op     string
	Method string
	// Bucket and Key are unescaped; Key is empty for bucket requests.
	Bucket, Key string
	RawQuery    string
	// Header is the request header as received.
	Header        http.Header
	ContentLength int64
	// Status is the HTTP status sent to the client, 0 if none was (reset
	// or stalled connection) or the request is still in flight.
	Status int
	// Fault names the action injected (Action.String), "" for none.
	Fault string
	// Rejected says which R2 rule refused the request and why, "" if none.
	Rejected string
	// Throttled says why the R2 rules' per-key write rate answered the
	// request 429, "" if it did not. Unlike Rejected it marks no mistake
	// of the client's: R2 answers so to any writer racing for a key.
	Throttled string
	// Time is when the request arrived.
	Time time.Time
}

// String describes the request in one line for test logs.
func (r Request) String() string {
	s := fmt.Sprintf("#%d %s %s /%s/%s", r.Seq, r.Op, r.Method, r.Bucket, r.Key)
	if r.RawQuery != "" {
		s += "?" + r.RawQuery
	}
	s += fmt.Sprintf(" (%d bytes) -> %d", r.ContentLength, r.Status)
	if r.Fault != "" {
		s += " fault: " + r.Fault
	}
	if r.Rejected != "" {
		s += " R2 rules: " + r.Rejected
	}
	if r.Throttled != "" {
		s += " R2 write rate: " + r.Throttled
	}
	return s
}

// Proxy is a running fault-injecting proxy. Its methods are safe for
// concurrent use.
type Proxy struct {
	target    *url.URL
	transport http.RoundTripper
	ownsTr    bool
	r2        bool
	// keyInterval is the per-key write interval of the R2 rules, <= 0 off.
	keyInterval time.Duration
	seed        int64
	maxRecords  int
	logf        func(format string, args ...any)
	creds       Credentials

	srv     *http.Server
	ln      net.Listener
	closing chan struct{} // closed by Close: ends delays and stalls
	wg      sync.WaitGroup
	// conns counts the client connections accepted, maxOpen the most open
	// at once.
	conns, open, maxOpen atomic.Int64

	mu         sync.Mutex
	started    bool
	closed     bool
	rnd        *rand.Rand
	rules      []*ruleState
	seq        int
	counts     map[string]int
	records    []*Request
	violations []*Request
	uploads    map[string]*upload
	// keyWrites is the last write to each recently written bucket/key
	// (r2_rate.go), swept at keySweep; throttled the requests answered 429
	// for it (the first maxRecords), throttledN how many.
	keyWrites  map[string]*keyWrite
	keySweep   time.Time
	throttled  []*Request
	throttledN int
}

// New returns a proxy to target (e.g. http://127.0.0.1:7070); Start starts
// it.
func New(target string, cfg Config) (*Proxy, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, fmt.Errorf("s3proxy: target %q: %w", target, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("s3proxy: target %q: want http://host:port or https://host:port", target)
	}
	p := &Proxy{
		target:     u,
		transport:  cfg.Transport,
		r2:         cfg.R2Rules,
		seed:       cfg.Seed,
		maxRecords: cfg.MaxRecords,
		logf:       cfg.Logf,
		creds:      cfg.Credentials,
		closing:    make(chan struct{}),
		counts:     map[string]int{},
		uploads:    map[string]*upload{},
		keyWrites:  map[string]*keyWrite{},
	}
	switch {
	case cfg.R2KeyWriteInterval == 0:
		p.keyInterval = DefaultR2KeyWriteInterval
	case cfg.R2KeyWriteInterval > 0:
		p.keyInterval = cfg.R2KeyWriteInterval
	}
	if p.seed == 0 {
		p.seed = time.Now().UnixNano()
	}
	p.rnd = rand.New(rand.NewSource(p.seed))
	if p.maxRecords <= 0 {
		p.maxRecords = DefaultMaxRecords
	}
	if p.logf == nil {
		p.logf = func(string, ...any) {}
	}
	if p.transport == nil {
		p.transport = newTransport()
		p.ownsTr = true
	}
	if err := p.SetRules(cfg.Rules...); err != nil {
		return nil, err
	}
	return p, nil
}

func newTransport() *http.Transport {
	return &http.Transport{
		Proxy:                 nil,
		DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          256,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       30 * time.Second,
		DisableCompression:    true,
		ResponseHeaderTimeout: 0, // the client's timeouts apply through the proxy
	}
}

// Start listens on a free port of 127.0.0.1 and serves until Close.
func (p *Proxy) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.started {
		return errors.New("s3proxy: already started")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("s3proxy: listen: %w", err)
	}
	p.started = true
	p.ln = ln
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second, ConnState: p.connState}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		_ = p.srv.Serve(ln) // returns http.ErrServerClosed after Close
	}()
	return nil
}

// connState counts client connections: each new one, and how many are
// open at once.
func (p *Proxy) connState(_ net.Conn, st http.ConnState) {
	switch st {
	case http.StateNew:
		p.conns.Add(1)
		n := p.open.Add(1)
		for {
			m := p.maxOpen.Load()
			if n <= m || p.maxOpen.CompareAndSwap(m, n) {
				break
			}
		}
	case http.StateHijacked, http.StateClosed:
		p.open.Add(-1)
	}
}

// Conns returns how many client connections the proxy accepted since it
// started (or since Reset), and the most that were open at once: what a
// client's connection reuse looks like from the server's side.
func (p *Proxy) Conns() (accepted, maxOpen int64) {
	return p.conns.Load(), p.maxOpen.Load()
}

// URL returns the proxy's base URL, http://127.0.0.1:PORT, once started.
func (p *Proxy) URL() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln == nil {
		return ""
	}
	return "http://" + p.ln.Addr().String()
}

// Seed returns the seed of the source Rule.Probability draws from.
func (p *Proxy) Seed() int64 { return p.seed }

// Close stops the proxy: it ends stalls and delays, closes every
// connection and waits for the requests in flight to end.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	srv := p.srv
	p.mu.Unlock()
	close(p.closing)
	var err error
	if srv != nil {
		err = srv.Close()
	}
	p.wg.Wait()
	if tr, ok := p.transport.(*http.Transport); ok && p.ownsTr {
		tr.CloseIdleConnections()
	}
	return err
}

// SetRules replaces the fault rules, with fresh counters. It may be called
// while requests are in flight; they keep the action they were given.
func (p *Proxy) SetRules(rules ...Rule) error {
	states := make([]*ruleState, len(rules))
	for i, r := range rules {
		if err := r.validate(); err != nil {
			return fmt.Errorf("s3proxy: %w", err)
		}
		r.Ops = append([]string(nil), r.Ops...)
		states[i] = &ruleState{Rule: r}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rules = states
	return nil
}

// Counts returns the number of requests received per operation since the
// start or the last Reset, faulted and refused ones included.
func (p *Proxy) Counts() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.counts)
}

// Requests returns the requests recorded since the start or the last
// Reset, in order of arrival.
func (p *Proxy) Requests() []Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]Request, len(p.records))
	for i, r := range p.records {
		out[i] = *r
	}
	return out
}

// Violations returns every request the R2 rules refused since the proxy
// started (Reset does not clear them). Writes answered 429 for the per-key
// write rate are not among them: see Throttled.
func (p *Proxy) Violations() []Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]Request, len(p.violations))
	for i, r := range p.violations {
		out[i] = *r
	}
	return out
}

// Reset clears the counts (connections included) and recorded requests.
// Rules and what the R2 rules track about multipart uploads and recent
// writes are kept.
func (p *Proxy) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.counts = map[string]int{}
	p.records = nil
	p.conns.Store(0)
	p.maxOpen.Store(p.open.Load())
}

// enter registers a request in flight, or reports that the proxy is closed.
func (p *Proxy) enter() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.wg.Add(1)
	return true
}

// record counts a new request and returns its record.
func (p *Proxy) record(op string, tg target, r *http.Request) *Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seq++
	p.counts[op]++
	rec := &Request{
		Seq: p.seq, Op: op, Method: r.Method, Bucket: tg.bucket, Key: tg.key,
		RawQuery: r.URL.RawQuery, Header: r.Header.Clone(), ContentLength: r.ContentLength,
		Time: time.Now(),
	}
	if len(p.records) < p.maxRecords {
		p.records = append(p.records, rec)
	}
	return rec
}

// update changes a record under the lock, as readers copy records.
func (p *Proxy) update(rec *Request, fn func(*Request)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fn(rec)
}

// pick returns the action for a request: that of the first rule that fires.
func (p *Proxy) pick(op, key string) Action {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range p.rules {
		if !r.matches(op, key) {
			continue
		}
		r.matched++
		if r.matched <= r.After || (r.Times > 0 && r.fired >= r.Times) {
			continue
		}
		if r.Probability > 0 && p.rnd.Float64() >= r.Probability {
			continue
		}
		r.fired++
		return r.Action
	}
	return Action{}
}
