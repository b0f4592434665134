package s3store

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"go.uber.org/zap"
	"golang.org/x/sync/singleflight"
)

// rotatingCredentials serves the credentials of the standard chain and
// reloads the chain when the server refuses them. The SDK resolves a
// shared credentials file once, at start, into static credentials that it
// caches forever, so a key rotated in the file (or by the
// credential_process it names) would never be seen by a long-running
// agent: every request would fail with InvalidAccessKeyId until a restart.
type rotatingCredentials struct {
	load func(ctx context.Context) (aws.CredentialsProvider, error)
	log  *zap.Logger

	mu  sync.Mutex // guards cur; never held across I/O
	cur aws.CredentialsProvider
	// reloads merges the reloads of requests refused at the same time.
	reloads singleflight.Group
}

// Retrieve implements aws.CredentialsProvider.
func (r *rotatingCredentials) Retrieve(ctx context.Context) (aws.Credentials, error) {
	r.mu.Lock()
	p := r.cur
	r.mu.Unlock()
	return p.Retrieve(ctx)
}

// renewed reloads the credential chain after the server refused used, and
// reports whether the credentials it now serves differ from used (then the
// refused request is worth another attempt).
func (r *rotatingCredentials) renewed(ctx context.Context, used aws.Credentials) bool {
	// Another request may have reloaded them already.
	if now, err := r.Retrieve(ctx); err == nil && !sameCredentials(now, used) {
		return true
	}
	v, err, _ := r.reloads.Do("reload", func() (any, error) { return r.reload(ctx) })
	if err != nil {
		r.log.Warn("S3 refused the credentials and reloading them failed; the request fails and will be retried with its step",
			zap.Error(err))
		return false
	}
	now := v.(aws.Credentials)
	return !sameCredentials(now, used)
}

// reload loads the chain again and serves its credentials from now on if
// they differ from the current ones.
func (r *rotatingCredentials) reload(ctx context.Context) (aws.Credentials, error) {
	old, _ := r.Retrieve(ctx)
	p, err := r.load(ctx)
	if err != nil {
		return aws.Credentials{}, err
	}
	now, err := p.Retrieve(ctx)
	if err != nil {
		return aws.Credentials{}, fmt.Errorf("s3store: read the reloaded credentials: %w", err)
	}
	if sameCredentials(now, old) {
		return now, nil
	}
	r.mu.Lock()
	r.cur = p
	r.mu.Unlock()
	r.log.Warn("S3 refused the credentials in use and new ones were found: retrying with the new credentials",
		zap.String("source", now.Source), zap.String("old_access_key", keyHint(old.AccessKeyID)),
		zap.String("new_access_key", keyHint(now.AccessKeyID)))
	return now, nil
}

func sameCredentials(a, b aws.Credentials) bool {
	return a.AccessKeyID == b.AccessKeyID && a.SecretAccessKey == b.SecretAccessKey && a.SessionToken == b.SessionToken
}

// keyHint names an access key ID by its last four characters: enough to
// tell two keys apart in a log, not to use one.
func keyHint(id string) string {
	if len(id) <= 4 {
		return "…"
	}
	return "…" + id[len(id)-4:]
}

// credentialsRefused reports whether err says the server does not accept
// the request's credentials (as opposed to their permissions).
func credentialsRefused(err error) bool {
	switch errorCode(err) {
	case "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken",
		"TokenRefreshRequired", "XAdminUserNotFound":
		return true
	}
	return false
}

// retryWithNewCredentials marks a refused request retryable: the
// credentials changed since it was signed.
type retryWithNewCredentials struct{ err error }

func (e *retryWithNewCredentials) Error() string {
	return fmt.Sprintf("%v (the credentials were renewed: retrying)", e.err)
}
func (e *retryWithNewCredentials) Unwrap() error { return e.err }

// RetryableError tells the SDK's retryer to try again.
func (e *retryWithNewCredentials) RetryableError() bool { return true }

// newRotatingCredentials loads the standard chain with opts.
func newRotatingCredentials(cur aws.CredentialsProvider, opts []func(*config.LoadOptions) error, log *zap.Logger) *rotatingCredentials {
	return &rotatingCredentials{cur: cur, log: log, load: func(ctx context.Context) (aws.CredentialsProvider, error) {
		cfg, err := config.LoadDefaultConfig(ctx, opts...)
		if err != nil {
			return nil, fmt.Errorf("s3store: reload AWS configuration: %w", err)
		}
		if cfg.Credentials == nil {
			return nil, errors.New("s3store: the reloaded AWS configuration has no credentials")
		}
		return cfg.Credentials, nil
	}}
}
