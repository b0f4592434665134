// Package s3store implements store.Store over the S3 API with
// aws-sdk-go-v2. It targets Cloudflare R2 first and any S3-compatible server
// (AWS S3, versitygw, MinIO) second.
//
// Integrity is carried by CRC32C checksums that the server verifies, so
// bodies are sent with UNSIGNED-PAYLOAD instead of a SigV4 SHA-256 over the
// body: a part is read once, by the socket.
package s3store

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go/logging"
	"go.uber.org/zap"
)

// Defaults for Config fields left zero.
const (
	DefaultMaxConns    = 64
	DefaultMaxAttempts = 10
	DefaultRegion      = "auto"
	// maxBackoff caps the jittered exponential delay between attempts.
	maxBackoff = 20 * time.Second
	// bufferSize of each connection's reader and writer: the 4 KiB default
	// costs a syscall per 4 KiB of part data.
	bufferSize = 128 << 10
)

// Config describes how to reach one bucket.
type Config struct {
	// Endpoint is the S3 API URL, e.g. https://<account>.r2.cloudflarestorage.com.
	// Empty means ResolveEndpoint(""), then the SDK's AWS endpoint.
	Endpoint string
	// Region defaults to AWS_REGION, then the profile's region, then "auto"
	// (what R2 expects).
	Region string
	// Bucket is required.
	Bucket string
	// PathStyle selects path-style addressing (endpoint/bucket/key). Nil means
	// path style when an endpoint is set, virtual-hosted style otherwise.
	PathStyle *bool
	// MaxConns bounds the connections to the endpoint and the idle ones kept;
	// it should be at least the upload concurrency. Default DefaultMaxConns.
	MaxConns int
	// MaxAttempts per request, the first included. Default DefaultMaxAttempts.
	MaxAttempts int
	// Profile selects a shared config profile; empty uses AWS_PROFILE or
	// "default".
	Profile string
	// AccessKeyID and SecretAccessKey, when both set, replace the standard
	// credential chain (environment, shared files, SSO, IMDS...).
	AccessKeyID, SecretAccessKey, SessionToken string
	// ResponseHeaderTimeout, when > 0, fails an attempt whose response headers
	// have not arrived this long after the request body was sent, so a hung
	// server costs a retry instead of a stuck upload. Keep it well above the
	// time the server needs to assemble a large multipart object.
	ResponseHeaderTimeout time.Duration
	// IdleTimeout fails an attempt whose connection has received nothing,
	// and sent nothing the peer took, for this long (a black-holed link), so
	// that it is retried on a new connection instead of hanging. 0 means EnvIdleTimeout, else
	// DefaultIdleTimeout; negative turns it off.
	IdleTimeout time.Duration
	// OnRequest, when set, is called once per HTTP attempt (retries included)
	// with the S3 operation name, e.g. "UploadPart". See Counters.
	OnRequest func(op string)
	// Logger receives debug lines about failed attempts. Nil logs nothing.
	Logger *zap.Logger

	// Test seams (export_test.go): dial replaces the dialer (a resolver
	// that fails), clockOffset shifts the signing clock (a host clock that
	// is wrong).
	dial        dialFunc
	clockOffset time.Duration
}

// ResolveEndpoint returns the endpoint to use: flag when set, else the first
// set of S3_ENDPOINT_URL, AWS_ENDPOINT_URL_S3 and AWS_ENDPOINT_URL, else "".
func ResolveEndpoint(flag string) string {
	if flag != "" {
		return flag
	}
	for _, name := range []string{"S3_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"} {
		if v := os.Getenv(name); v != "" {
			return v
		}
	}
	return ""
}

// Store is a store.Store over one S3 bucket. It is safe for concurrent use.
type Store struct {
	client *s3.Client
	bucket string
	// endpoint is the resolved endpoint ("" for AWS S3), for error messages.
	endpoint string
	log      *zap.Logger
	// maxAttempts bounds the 429s a conditional PUT resolves (conditional.go).
	maxAttempts int
}

// New builds a Store from cfg. It makes no request: a missing bucket or bad
// credentials show up on the first call (or on CheckBucket).
func New(ctx context.Context, cfg Config) (*Store, error) {
	if cfg.Bucket == "" {
		return nil, errors.New("s3store: no bucket given")
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = DefaultMaxAttempts
	}
	log := cfg.Logger
	if log == nil {
		log = zap.NewNop()
	}
	endpoint := ResolveEndpoint(cfg.Endpoint)
	idle, err := idleTimeout(cfg)
	if err != nil {
		return nil, err
	}

	loadOpts := loadOptions(cfg, idle, log)
	static := cfg.AccessKeyID != "" && cfg.SecretAccessKey != ""
	awsCfg, err := config.LoadDefaultConfig(ctx, loadOpts...)
	if err != nil {
		// LoadDefaultConfig errors name files and settings, never secrets.
		return nil, fmt.Errorf("s3store: load AWS configuration: %w", err)
	}
	if cfg.clockOffset != 0 {
		awsCfg.HTTPClient = skewedClock{next: awsCfg.HTTPClient, offset: cfg.clockOffset}
	}
	if awsCfg.Region == "" {
		awsCfg.Region = DefaultRegion
	}

	pathStyle := endpoint != ""
	if cfg.PathStyle != nil {
		pathStyle = *cfg.PathStyle
	}
	attempts := &attemptMiddleware{onRequest: cfg.OnRequest, log: log}
	if !static && awsCfg.Credentials != nil {
		// Credentials from the chain may be rotated while ferry runs.
		attempts.creds = newRotatingCredentials(awsCfg.Credentials, loadOpts, log)
		awsCfg.Credentials = attempts.creds
	}
	client := s3.NewFromConfig(awsCfg, func(o *s3.Options) {
		if endpoint != "" {
			o.BaseEndpoint = aws.String(endpoint)
		}
		o.UsePathStyle = pathStyle
		// R2 does not support Expect: 100-continue; waiting for the 100
		// costs up to a second per part on servers that ignore it.
		o.ContinueHeaderThresholdBytes = -1
		o.APIOptions = append(o.APIOptions, attempts.add)
		if cfg.clockOffset != 0 {
			o.HTTPSignerV4 = skewedSigner{HTTPSignerV4: newSigner(*o), offset: cfg.clockOffset}
		}
	})
	return &Store{client: client, bucket: cfg.Bucket, endpoint: endpoint, log: log, maxAttempts: cfg.MaxAttempts}, nil
}

// loadOptions are the SDK's configuration options for cfg: our transport,
// retries, checksums, log, region, profile and static keys.
func loadOptions(cfg Config, idle time.Duration, log *zap.Logger) []func(*config.LoadOptions) error {
	loadOpts := []func(*config.LoadOptions) error{
		config.WithHTTPClient(newHTTPClient(cfg, idle)),
		config.WithRetryer(func() aws.Retryer { return newRetryer(cfg.MaxAttempts) }),
		// Since service/s3 v1.73.0 the SDK adds CRC32 to every upload and
		// validates response checksums, which R2 and others reject. We send
		// CRC32C ourselves.
		config.WithRequestChecksumCalculation(aws.RequestChecksumCalculationWhenRequired),
		config.WithResponseChecksumValidation(aws.ResponseChecksumValidationWhenRequired),
		// The SDK's own lines ("falling back to IMDSv1") go to our log at
		// debug, not raw to stderr: what matters reaches the user as the
		// error of the request that failed.
		config.WithLogger(sdkLogger{log}),
	}
	if cfg.Region != "" {
		loadOpts = append(loadOpts, config.WithRegion(cfg.Region))
	}
	if cfg.Profile != "" {
		loadOpts = append(loadOpts, config.WithSharedConfigProfile(cfg.Profile))
	}
	if cfg.AccessKeyID != "" && cfg.SecretAccessKey != "" {
		loadOpts = append(loadOpts, config.WithCredentialsProvider(
			credentials.NewStaticCredentialsProvider(cfg.AccessKeyID, cfg.SecretAccessKey, cfg.SessionToken)))
	}
	return loadOpts
}

// Bucket returns the bucket the store writes to.
func (s *Store) Bucket() string { return s.bucket }

// newHTTPClient keeps the SDK's BuildableClient so that the transport stays
// an *http.Transport: config.LoadDefaultConfig refuses AWS_CA_BUNDLE with
// any other client.
func newHTTPClient(cfg Config, idle time.Duration) *awshttp.BuildableClient {
	return awshttp.NewBuildableClient().WithTransportOptions(func(tr *http.Transport) {
		dial := tr.DialContext
		if cfg.dial != nil {
			dial = cfg.dial
		}
		if dial == nil {
			dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
		}
		tr.DialContext = idleDial(dial, idle)
		tr.MaxIdleConns = max(tr.MaxIdleConns, cfg.MaxConns)
		tr.MaxIdleConnsPerHost = cfg.MaxConns
		tr.MaxConnsPerHost = cfg.MaxConns
		tr.ResponseHeaderTimeout = cfg.ResponseHeaderTimeout
		tr.WriteBufferSize = bufferSize
		tr.ReadBufferSize = bufferSize
		// HTTP/1.1 only: one TCP connection per request in flight, as s5cmd
		// and aws-cli do. HTTP/2 would multiplex every part over a single
		// connection and its one congestion window.
		tr.ForceAttemptHTTP2 = false
		tr.Protocols = new(http.Protocols)
		tr.Protocols.SetHTTP1(true)
		// The SDK made this transport by cloning its default one, and
		// http.Transport.Clone first sets the default's HTTP/2 up: the TLS
		// config came with ALPN offering h2. A server that speaks HTTP/2
		// (SeaweedFS, MinIO, any CDN edge) would take it and get HTTP/1.1
		// on an HTTP/2 connection: every request over HTTPS reset.
		if tr.TLSClientConfig != nil {
			tr.TLSClientConfig.NextProtos = []string{"http/1.1"}
		}
	})
}

// newRetryer returns the standard retryer without its retry quota (a shared
// token bucket that fails requests with "retry quota exceeded" under many
// concurrent uploads), with more attempts and with the throttling and
// transient errors object stores send added to the retryable set.
func newRetryer(attempts int) aws.Retryer {
	return retry.NewStandard(func(o *retry.StandardOptions) {
		o.MaxAttempts = attempts
		o.MaxBackoff = maxBackoff
		o.RateLimiter = ratelimit.None
		// First: the SDK counts every failure to send as a connection
		// error, certificate failures included, and would retry those.
		o.Retryables = append([]retry.IsErrorRetryable{noRetryTLS{}}, o.Retryables...)
		o.Retryables = append(o.Retryables,
			retry.RetryableHTTPStatusCode{Codes: map[int]struct{}{http.StatusTooManyRequests: {}}},
			retry.RetryableErrorCode{Codes: map[string]struct{}{
				"SlowDown":           {},
				"RequestTimeout":     {},
				"InternalError":      {},
				"ServiceUnavailable": {},
			}},
			retryableBrokenBody{},
		)
	})
}

// DeriveKey returns the HMAC-SHA256 of label under the secret access key
// of the store's credentials: every holder of the same credentials derives
// the same key, nobody else can, and the secret itself never leaves the
// store (ferry's peers sign their requests with such a key). Temporary
// credentials that differ from node to node derive different keys.
func (s *Store) DeriveKey(ctx context.Context, label string) ([]byte, error) {
	provider := s.client.Options().Credentials
	if provider == nil {
		return nil, errors.New("s3store: no credentials to derive a key from")
	}
	creds, err := provider.Retrieve(ctx)
	if err != nil {
		return nil, fmt.Errorf("s3store: read the credentials to derive a key: %w", err)
	}
	if creds.SecretAccessKey == "" {
		return nil, errors.New("s3store: the credentials have no secret to derive a key from")
	}
	h := hmac.New(sha256.New, []byte(creds.SecretAccessKey))
	h.Write([]byte(label))
	return h.Sum(nil), nil
}

// CredentialSource retrieves the store's credentials and returns the name
// of the provider they came from (the SDK's: EnvConfigCredentials,
// SharedConfigCredentials, StaticCredentials...), never a key or secret.
func (s *Store) CredentialSource(ctx context.Context) (string, error) {
	provider := s.client.Options().Credentials
	if provider == nil {
		return "", errors.New("no credentials provider")
	}
	creds, err := provider.Retrieve(ctx)
	if err != nil {
		return "", err
	}
	return creds.Source, nil
}

// sdkLogger hands the SDK's log lines to zap at debug level.
type sdkLogger struct{ log *zap.Logger }

// Logf implements logging.Logger.
func (l sdkLogger) Logf(c logging.Classification, format string, v ...any) {
	l.log.Debug(fmt.Sprintf(format, v...), zap.String("from", "aws-sdk"), zap.String("level", string(c)))
}
