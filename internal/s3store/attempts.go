package s3store

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/smithy-go/middleware"
	"go.uber.org/zap"
)

// Counters counts S3 requests by operation name. Pass its Count method as
// Config.OnRequest. The zero value is ready to use and safe for concurrent
// use.
type Counters struct {
	mu sync.Mutex
	n  map[string]int64
}

// Count adds one request of operation op.
func (c *Counters) Count(op string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int64{}
	}
	c.n[op]++
}

// Get returns the number of requests of operation op so far.
func (c *Counters) Get(op string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[op]
}

// Total returns the number of requests of all operations so far.
func (c *Counters) Total() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var t int64
	for _, v := range c.n {
		t += v
	}
	return t
}

// Snapshot returns a copy of the counts by operation name.
func (c *Counters) Snapshot() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := make(map[string]int64, len(c.n))
	for k, v := range c.n {
		m[k] = v
	}
	return m
}

// Ops returns the names of the operations counted so far, sorted.
func (c *Counters) Ops() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Sorted(maps.Keys(c.n))
}

// attemptMiddleware sits in the finalize step just inside the retry loop, so
// it sees every HTTP attempt: each one is billed by the provider.
//
// Failed attempts are logged at debug level, and at warn level once
// failures have gone on for retryVisibleAfter without a success (at most
// every retryVisibleEvery): an unreachable endpoint is retried for many
// seconds before the error surfaces, and a user must see why nothing moves.
// An idle timeout (a dead link) is logged each time, at info level the
// first time in a row and at warn level after.
type attemptMiddleware struct {
	onRequest func(op string)
	log       *zap.Logger
	// creds, when set, is reloaded when the server refuses them.
	creds *rotatingCredentials

	mu         sync.Mutex
	failSince  time.Time // first failure since the last success; zero if none
	lastLogged time.Time
}

const (
	retryVisibleAfter = 3 * time.Second
	retryVisibleEvery = 5 * time.Second
)

type uncountedKey struct{}

// Uncounted returns a context whose requests Config.OnRequest does not see:
// a check the command makes besides its work (the conditional-write
// check), on the same connections but outside the command's request
// counts.
func Uncounted(ctx context.Context) context.Context {
	return context.WithValue(ctx, uncountedKey{}, true)
}

// add inserts m into a client's middleware stack.
func (m *attemptMiddleware) add(stack *middleware.Stack) error {
	return stack.Finalize.Insert(m, "Retry", middleware.After)
}

// visible reports whether a failure now should be logged at info level,
// and updates the failure streak.
func (m *attemptMiddleware) visible(failed bool) (bool, time.Duration) {
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	if !failed {
		m.failSince = time.Time{}
		return false, 0
	}
	if m.failSince.IsZero() {
		m.failSince = now
	}
	streak := now.Sub(m.failSince)
	if streak < retryVisibleAfter || now.Sub(m.lastLogged) < retryVisibleEvery {
		return false, streak
	}
	m.lastLogged = now
	return true, streak
}

// ID implements middleware.FinalizeMiddleware.
func (*attemptMiddleware) ID() string { return "FerryAttempt" }

// HandleFinalize implements middleware.FinalizeMiddleware.
func (m *attemptMiddleware) HandleFinalize(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (
	middleware.FinalizeOutput, middleware.Metadata, error,
) {
	op := awsmiddleware.GetOperationName(ctx)
	if m.onRequest != nil && ctx.Value(uncountedKey{}) == nil {
		m.onRequest(op)
	}
	var used aws.Credentials
	if m.creds != nil {
		used, _ = m.creds.Retrieve(ctx)
	}
	out, md, err := next.HandleFinalize(ctx, in)
	if ctx.Err() != nil {
		return out, md, err
	}
	if err != nil && m.creds != nil && credentialsRefused(err) && m.creds.renewed(ctx, used) {
		err = &retryWithNewCredentials{err: err}
	}
	show, streak := m.visible(err != nil && !storeAnswered(err))
	if err != nil && !storeAnswered(err) {
		// SDK errors carry the operation, status and request ID, never
		// credentials: requests are signed in headers, not in URLs.
		var idle *IdleTimeoutError
		switch {
		case errors.As(err, &idle) && streak == 0:
			// A dead link is worth a line each time: it costs IdleTimeout.
			m.log.Info("S3 request timed out; retrying", zap.String("op", op), zap.Error(err))
		case errors.As(err, &idle):
			// Not the first failure in a row: an operator should hear it.
			m.log.Warn("S3 request timed out; retrying", zap.String("op", op), zap.String("failing_for", streak.Round(time.Second).String()), zap.Error(err))
		case show:
			m.log.Warn("still retrying S3 requests", zap.String("op", op), zap.String("failing_for", streak.Round(time.Second).String()), zap.Error(err))
		default:
			m.log.Debug("s3 request attempt failed", zap.String("op", op), zap.Error(err))
		}
	}
	return out, md, err
}

// storeAnswered reports whether err is the store's definite answer (an
// absent key, a refused precondition, a denied request: any 4xx but 408
// and 429), which no retry changes: not a failure to reach the store. A
// node-done agent HEADs a manifest that is not there yet every few
// seconds; each 404 was counted in the failure streak and logged at warn
// as "still retrying S3 requests".
func storeAnswered(err error) bool {
	s := httpStatus(err)
	return s >= 400 && s < 500 && s != http.StatusRequestTimeout && s != http.StatusTooManyRequests
}

// retryableBrokenBody retries a response cut short while it was read (the
// SDK already retries errors from sending the request and reading headers).
type retryableBrokenBody struct{}

// IsErrorRetryable implements retry.IsErrorRetryable.
func (retryableBrokenBody) IsErrorRetryable(err error) aws.Ternary {
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return aws.TrueTernary
	}
	return aws.UnknownTernary
}

// noRetryTLS stops retries of certificate verification failures: a wrong CA
// or host name does not heal within a backoff.
type noRetryTLS struct{}

// IsErrorRetryable implements retry.IsErrorRetryable.
func (noRetryTLS) IsErrorRetryable(err error) aws.Ternary {
	var verifyErr *tls.CertificateVerificationError
	var unknownCA x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var invalidErr x509.CertificateInvalidError
	if errors.As(err, &verifyErr) || errors.As(err, &unknownCA) || errors.As(err, &hostErr) || errors.As(err, &invalidErr) || notTLS(err) {
		return aws.FalseTernary
	}
	return aws.UnknownTernary
}

// notTLS reports a failure of an https:// endpoint whose server does not
// speak TLS at all: plain HTTP on that port (net/http says so in words
// only), or any other protocol.
func notTLS(err error) bool {
	var rh tls.RecordHeaderError
	return errors.As(err, &rh) || strings.Contains(err.Error(), "server gave HTTP response to HTTPS client")
}
