package s3test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/ferrylabs/ferry/internal/s3store"
	"github.com/ferrylabs/ferry/internal/wanlink"
)

// Client returns a plain SDK client for the server, built without ferry
// code, for tests that check what ferry wrote from the outside.
func (s *Server) Client(t testing.TB) *s3.Client {
	t.Helper()
	s.clientOnce.Do(func() {
		httpClient := &http.Client{}
		if s.CAFile != "" {
			tr, err := s.tlsTransport()
			if err != nil {
				t.Fatalf("s3test: %v", err)
			}
			httpClient.Transport = tr
		}
		s.client = plainClient(s, httpClient, 0)
	})
	return s.client
}

// plainClient is an SDK client for s without ferry code. It is patient
// with throttling, as ferry's own store is: through the R2-rules proxy a
// test that overwrites an object ferry has just written meets R2's one
// write per key per second (429). continueThreshold is the SDK's
// ContinueHeaderThresholdBytes (0: its default; -1: never Expect:
// 100-continue).
func plainClient(s *Server, httpClient *http.Client, continueThreshold int64) *s3.Client {
	return s3.New(s3.Options{
		BaseEndpoint:                 aws.String(s.Endpoint),
		Region:                       s.Region,
		UsePathStyle:                 true,
		Credentials:                  credentials.NewStaticCredentialsProvider(s.AccessKey, s.SecretKey, ""),
		HTTPClient:                   httpClient,
		RequestChecksumCalculation:   aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation:   aws.ResponseChecksumValidationWhenRequired,
		ContinueHeaderThresholdBytes: continueThreshold,
		Retryer: retry.NewStandard(func(o *retry.StandardOptions) {
			o.MaxAttempts, o.MaxBackoff = 10, 2*time.Second
		}),
	})
}

var nonBucketChars = regexp.MustCompile(`[^a-z0-9-]+`)

// NewBucket creates a bucket named after the test with a random suffix and
// removes its directory when the test ends.
func (s *Server) NewBucket(t testing.TB) string {
	t.Helper()
	name := strings.Trim(nonBucketChars.ReplaceAllString(strings.ToLower(t.Name()), "-"), "-")
	if len(name) > 40 {
		name = strings.TrimRight(name[:40], "-")
	}
	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	bucket := "t-" + name + "-" + hex.EncodeToString(suffix[:])
	_, err := s.Client(t).CreateBucket(context.Background(), &s3.CreateBucketInput{Bucket: aws.String(bucket)})
	if err != nil {
		t.Fatalf("s3test: create bucket %s: %v", bucket, err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(filepath.Join(s.Dir, bucket)) })
	return bucket
}

// Store returns an s3store.Store for bucket on the server, with the
// server's credentials passed in its Config rather than the environment.
// For a TLS server it sets AWS_CA_BUNDLE with t.Setenv, as a user would, so
// the test must not be parallel.
func (s *Server) Store(t testing.TB, bucket string) *s3store.Store {
	t.Helper()
	return s.StoreWith(t, s3store.Config{Bucket: bucket})
}

// StoreWith is Store with more settings: cfg's Endpoint, Region and
// credentials default to the server's.
func (s *Server) StoreWith(t testing.TB, cfg s3store.Config) *s3store.Store {
	t.Helper()
	if cfg.Endpoint == "" {
		cfg.Endpoint = s.Endpoint
	}
	if cfg.Region == "" {
		cfg.Region = s.Region
	}
	if cfg.AccessKeyID == "" {
		cfg.AccessKeyID, cfg.SecretAccessKey = s.AccessKey, s.SecretKey
	}
	if s.CAFile != "" {
		t.Setenv("AWS_CA_BUNDLE", s.CAFile)
	}
	st, err := s3store.New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("s3test: %v", err)
	}
	return st
}

// EnvToxiproxy names the environment variable holding the toxiproxy server
// binary for tests through an emulated internet link (make test-wan).
const EnvToxiproxy = "FERRY_TOXIPROXY"

// ThroughLink starts toxiproxy in front of s, shaped as l and stopped when
// t ends, and returns it with the endpoint URL that reaches s through it.
// It skips t when EnvToxiproxy is not set.
func (s *Server) ThroughLink(t testing.TB, l wanlink.Link) (*wanlink.Proxy, string) {
	t.Helper()
	bin := os.Getenv(EnvToxiproxy)
	if bin == "" {
		t.Skip(EnvToxiproxy + " is not set (make test-wan builds toxiproxy)")
	}
	u, err := url.Parse(s.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	p, err := wanlink.Start(bin, u.Host, l)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	return p, u.Scheme + "://" + p.Addr
}
