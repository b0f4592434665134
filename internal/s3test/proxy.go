package s3test

import (
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/ferrylabs/ferry/internal/s3proxy"
)

// EnvR2Rules names the environment variable that, set to anything but ""
// or "0", puts the shared server behind an s3proxy in R2 rules mode: every
// test using Shared then runs as if against Cloudflare R2, and the test
// binary fails if any request broke an R2 rule.
const EnvR2Rules = "FERRY_S3TEST_R2RULES"

// R2Rules reports whether EnvR2Rules is set, i.e. whether Shared returns a
// server behind an R2-rules proxy.
func R2Rules() bool {
	v := os.Getenv(EnvR2Rules)
	return v != "" && v != "0"
}

// WithProxy starts an s3proxy in front of s and returns a view of s whose
// Endpoint points at the proxy, so that its Env, Client, Store and NewBucket
// go through it, and the proxy. The proxy closes when t ends. The view
// speaks plain HTTP even in front of a TLS server. Stop, Kill and Restart
// panic on the view: call them on s.
func (s *Server) WithProxy(t testing.TB, cfg s3proxy.Config) (*Server, *s3proxy.Proxy) {
	t.Helper()
	if cfg.Logf == nil {
		cfg.Logf = t.Logf
	}
	view, px, err := s.withProxy(cfg)
	if err != nil {
		t.Fatalf("s3test: %v", err)
	}
	// Logging to t after it ends panics: close first (cleanups run last
	// registered first, so after the test's own).
	t.Cleanup(func() { _ = px.Close() })
	return view, px
}

func (s *Server) withProxy(cfg s3proxy.Config) (*Server, *s3proxy.Proxy, error) {
	if cfg.Transport == nil && s.CAFile != "" {
		tr, err := s.tlsTransport()
		if err != nil {
			return nil, nil, err
		}
		tr.DisableCompression = true
		tr.Proxy = nil
		cfg.Transport = tr
	}
	if cfg.Credentials == (s3proxy.Credentials{}) {
		// For actions that change a signed request (IgnoreConditions).
		cfg.Credentials = s3proxy.Credentials{AccessKey: s.AccessKey, SecretKey: s.SecretKey, Region: s.Region}
	}
	px, err := s3proxy.New(s.Endpoint, cfg)
	if err != nil {
		return nil, nil, err
	}
	if err := px.Start(); err != nil {
		return nil, nil, err
	}
	view := &Server{
		Endpoint:  px.URL(),
		AccessKey: s.AccessKey,
		SecretKey: s.SecretKey,
		Region:    s.Region,
		Dir:       s.Dir,
		bin:       s.bin,
		kind:      s.kind,
		addr:      strings.TrimPrefix(px.URL(), "http://"),
		// Not the server's process to stop.
		shared: true,
	}
	// R2 never sends 100 Continue, so the R2 rules refuse Expect:
	// 100-continue, which the SDK sends for bodies over 2 MiB by default.
	// The view's plain client does not ask for it, as ferry's does not.
	view.clientOnce.Do(func() {
		view.client = plainClient(view, &http.Client{}, -1)
	})
	return view, px, nil
}

// frontShared returns what Shared hands out for the shared server s: s
// itself, or with EnvR2Rules set, a view of s behind an R2-rules proxy,
// which logs every refusal to stderr.
func frontShared(s *Server) (*Server, *s3proxy.Proxy, error) {
	if !R2Rules() {
		return s, nil, nil
	}
	view, px, err := s.withProxy(s3proxy.Config{
		R2Rules: true,
		Logf: func(format string, args ...any) {
			fmt.Fprintf(os.Stderr, format+"\n", args...)
		},
	})
	if err != nil {
		return nil, nil, fmt.Errorf("R2 rules proxy: %w", err)
	}
	return view, px, nil
}

// closeSharedProxy closes the shared server's R2-rules proxy, if any, and
// returns the exit code: 1 instead of 0 when a request broke an R2 rule,
// even if every test passed (a test may tolerate the error R2 sends).
func closeSharedProxy(px *s3proxy.Proxy, code int) int {
	if px == nil {
		return code
	}
	_ = px.Close()
	v := px.Violations()
	total := 0
	for _, n := range px.Counts() {
		total += n
	}
	if len(v) == 0 {
		fmt.Fprintf(os.Stderr, "s3test: %s: the R2 rules proxy passed all %d requests\n", EnvR2Rules, total)
		return code
	}
	fmt.Fprintf(os.Stderr, "s3test: %s: the R2 rules proxy refused %d requests:\n", EnvR2Rules, len(v))
	for _, r := range v {
		fmt.Fprintf(os.Stderr, "  %s\n", r)
	}
	if code == 0 {
		code = 1
	}
	return code
}

// AsR2 returns s, or, when EnvR2Rules is set, a view of s behind an
// R2-rules proxy of its own, as Shared returns: for a test's second
// server. t fails when the proxy refused a request.
func (s *Server) AsR2(t testing.TB) *Server {
	t.Helper()
	if !R2Rules() {
		return s
	}
	view, px := s.WithProxy(t, s3proxy.Config{R2Rules: true})
	view.AccessKey, view.SecretKey = s.AccessKey, s.SecretKey
	t.Cleanup(func() {
		for _, r := range px.Violations() {
			t.Errorf("s3test: the R2 rules proxy refused %s %s: %s", r.Op, r.Method, r.Rejected)
		}
	})
	return view
}
