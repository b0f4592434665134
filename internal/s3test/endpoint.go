package s3test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/internal/s3store"
)

// The opt-in suite against a real endpoint (make test-endpoint): R2, AWS
// S3, MinIO or any other, for whoever has one at hand. Credentials come
// from the environment as ferry reads them (AWS_ACCESS_KEY_ID and
// AWS_SECRET_ACCESS_KEY, AWS_PROFILE, ...). Nothing is created but objects
// under one fresh prefix of the bucket, all deleted when the test ends.
const (
	EnvTestEndpoint = "FERRY_TEST_S3_ENDPOINT"
	EnvTestBucket   = "FERRY_TEST_S3_BUCKET"
	// EnvTestRegion is optional (else AWS_REGION, else "auto").
	EnvTestRegion = "FERRY_TEST_S3_REGION"
)

// Endpoint is a real bucket the opt-in suite runs against.
type Endpoint struct {
	URL, Bucket, Region string
	// Prefix is this run's own prefix in the bucket, without a trailing
	// slash: ferry-compat/<time>-<random>.
	Prefix string
}

// RealEndpoint returns the endpoint the environment names, or skips t when
// EnvTestEndpoint or EnvTestBucket is unset (also with -short).
func RealEndpoint(t testing.TB) Endpoint {
	t.Helper()
	e := Endpoint{URL: os.Getenv(EnvTestEndpoint), Bucket: os.Getenv(EnvTestBucket), Region: os.Getenv(EnvTestRegion)}
	if e.URL == "" || e.Bucket == "" || testing.Short() {
		t.Skipf("s3test: set %s and %s (and credentials, as for ferry) to run against a real endpoint", EnvTestEndpoint, EnvTestBucket)
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	e.Prefix = "ferry-compat/" + time.Now().UTC().Format("20060102T150405") + "-" + hex.EncodeToString(b[:])
	return e
}

// Store opens the bucket with the environment's credentials.
func (e Endpoint) Store(t testing.TB) *s3store.Store {
	t.Helper()
	st, err := s3store.New(context.Background(), s3store.Config{Endpoint: e.URL, Region: e.Region, Bucket: e.Bucket})
	if err != nil {
		t.Fatalf("s3test: %v", err)
	}
	return st
}

// Env returns the environment a ferry subprocess needs for the endpoint:
// this process's AWS_* settings, HOME and PATH, and the endpoint.
func (e Endpoint) Env() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "AWS_") && !strings.HasPrefix(kv, "AWS_ENDPOINT_URL") {
			env = append(env, kv)
		}
	}
	env = append(env, "S3_ENDPOINT_URL="+e.URL)
	if e.Region != "" {
		env = append(env, "AWS_REGION="+e.Region) // after the environment's: the last wins
	}
	return env
}
