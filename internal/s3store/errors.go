package s3store

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"

	"github.com/ferrylabs/ferry/internal/store"

	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// ErrAccessDenied is returned (wrapped) when the server refuses the
// credentials or their permissions (HTTP 403, InvalidAccessKeyId,
// SignatureDoesNotMatch, ExpiredToken...), or when no credentials were found.
var ErrAccessDenied = errors.New("access denied")

// ErrNoSuchBucket is returned (wrapped) when the bucket does not exist. Such
// errors also match store.ErrNotExist, as the store contract requires.
var ErrNoSuchBucket = store.ErrNoBucket

// storeError carries a message of its own while matching sentinels with
// errors.Is, so that a user reads one clear line instead of the SDK's.
type storeError struct {
	msg     string
	targets []error
	cause   error
	// reason is the part of msg after the failed operation when it says
	// what the user must fix (bucket, region, credentials, endpoint).
	reason string
}

func (e *storeError) Error() string { return e.msg }

// UserReason returns what the user must fix, without the operation and key
// that failed, or "" when the error is not the user's to fix. The CLI
// prints it after the command's own context instead of the whole chain.
func (e *storeError) UserReason() string { return e.reason }

// actionable returns a storeError for what that failed because of reason,
// something the user must fix.
func actionable(what, reason string, cause error, targets ...error) *storeError {
	return &storeError{msg: what + ": " + reason, reason: reason, cause: cause, targets: targets}
}

// Is reports whether target is one of the sentinels e stands for.
func (e *storeError) Is(target error) bool {
	for _, t := range e.targets {
		if t == target {
			return true
		}
	}
	return false
}

// Unwrap returns the SDK error, for callers that need its details.
func (e *storeError) Unwrap() error { return e.cause }

// accessDeniedCodes are the error codes of credential and permission failures; HTTP 403 is one too.
var accessDeniedCodes = map[string]bool{
	"AccessDenied":          true,
	"InvalidAccessKeyId":    true,
	"SignatureDoesNotMatch": true,
	"ExpiredToken":          true,
	"InvalidToken":          true,
	"TokenRefreshRequired":  true,
	"Forbidden":             true,
	// versitygw answers an unknown access key with 404 XAdminUserNotFound.
	"XAdminUserNotFound": true,
}

// mapErr turns an SDK error from the operation described by what (e.g.
// "upload part 3 of k") into an error wrapping the store sentinels.
// conditional says the request carried If-None-Match, so that 409 and 412
// mean a lost race rather than a failure.
func (s *Store) mapErr(err error, what string, conditional bool) error {
	if err == nil {
		return nil
	}
	code, status := errorCode(err), 0
	var respErr *smithyhttp.ResponseError
	if errors.As(err, &respErr) {
		status = respErr.HTTPStatusCode()
	}
	switch {
	case noCredentials(err):
		// Before the status: an instance metadata service that refuses
		// (403) is no verdict of the store on our keys.
		return actionable(what, "no usable AWS credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE",
			err, ErrAccessDenied)
	case code == "NoSuchBucket":
		return actionable(what, fmt.Sprintf("bucket %q does not exist at %s: create it, or fix the bucket in the s3:// URL or the endpoint",
			s.bucket, s.endpointName()), err, ErrNoSuchBucket, store.ErrNotExist)
	case wrongRegionCodes[code]:
		return actionable(what, fmt.Sprintf("wrong region (%s: %s): set --region or AWS_REGION to the bucket's region", code, serverMessage(err)),
			err, ErrAccessDenied)
	case code == "RequestTimeTooSkewed":
		// The SDK corrects a skewed clock from the server's Date header and
		// retries; this is left when it could not.
		return actionable(what, fmt.Sprintf("this host's clock differs from %s's by more than the 15 minutes S3 allows "+
			"(RequestTimeTooSkewed): set the clock right (chrony or systemd-timesyncd)", s.endpointName()), err, ErrAccessDenied)
	case accessDeniedCodes[code] || status == http.StatusForbidden:
		return s.accessDenied(err, what, code)
	case code == "NoSuchUpload":
		return &storeError{
			msg:     what + ": upload does not exist (completed, aborted or expired)",
			targets: []error{store.ErrNotExist},
			cause:   err,
		}
	case code == "NoSuchKey" || code == "NotFound" || status == http.StatusNotFound:
		return &storeError{
			msg:     what + ": " + store.ErrNotExist.Error(),
			targets: []error{store.ErrNotExist},
			cause:   err,
		}
	case conditional && (status == http.StatusPreconditionFailed || code == "PreconditionFailed" ||
		status == http.StatusConflict || code == "ConditionalRequestConflict"):
		return &storeError{
			msg:     what + ": " + store.ErrPreconditionFailed.Error(),
			targets: []error{store.ErrPreconditionFailed},
			cause:   err,
		}
	case status == 0 && notTLS(err):
		return actionable(what, fmt.Sprintf("%s does not speak TLS (it answers plain HTTP, or another protocol): use an http:// endpoint "+
			"for it, or the port where it serves HTTPS", s.endpointName()), err)
	case status == 0 && isDialError(err):
		return actionable(what, fmt.Sprintf("cannot connect to %s (%v): %s", s.endpointName(), dialCause(err), dialAdvice(err)), err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

func (s *Store) accessDenied(err error, what, code string) error {
	reason := code
	if reason == "" {
		reason = "HTTP 403"
	}
	if code == "ExpiredToken" || code == "TokenRefreshRequired" {
		return actionable(what, fmt.Sprintf("the credentials have expired (%s): renew them (a new AWS_SESSION_TOKEN, "+
			"or log in again for AWS_PROFILE)", code), err, ErrAccessDenied)
	}
	return actionable(what, fmt.Sprintf("access denied (%s): check the credentials (AWS_ACCESS_KEY_ID and "+
		"AWS_SECRET_ACCESS_KEY, or AWS_PROFILE) and their permissions on bucket %q", reason, s.bucket), err, ErrAccessDenied)
}

// errorCode returns the S3 error code of err, or "".
func errorCode(err error) string {
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode()
	}
	return ""
}

// wrongRegionCodes are the error codes of a request signed for another
// region than the bucket's (S3 answers a path-style request to a bucket of
// another region with 301 PermanentRedirect).
var wrongRegionCodes = map[string]bool{
	"AuthorizationHeaderMalformed":       true,
	"AuthorizationQueryParametersError":  true,
	"PermanentRedirect":                  true,
	"IllegalLocationConstraintException": true,
	"InvalidRegion":                      true,
}

// serverMessage returns the server's error message, which for a wrong
// region names the region expected.
func serverMessage(err error) string {
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorMessage() != "" {
		return apiErr.ErrorMessage()
	}
	return "the server gave no message"
}

// endpointName names the endpoint for messages.
func (s *Store) endpointName() string {
	if s.endpoint == "" {
		return "AWS S3"
	}
	return s.endpoint
}

// noCredentials reports that the SDK found no credentials to sign with:
// the request never reached the store.
func noCredentials(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "failed to retrieve credentials") || strings.Contains(msg, "failed to refresh cached credentials")
}

// isDialError reports whether err is a failure to open a connection.
func isDialError(err error) bool {
	var opErr *net.OpError
	return errors.As(err, &opErr) && opErr.Op == "dial"
}

// dialCause returns the reason a connection failed ("connection refused").
func dialCause(err error) error {
	var opErr *net.OpError
	if errors.As(err, &opErr) {
		if sys := opErr.Err; sys != nil {
			var se *os.SyscallError
			if errors.As(sys, &se) {
				return se.Err
			}
			return sys
		}
	}
	return err
}

// dialAdvice says what to check when a connection failed: a name that
// did not resolve points at the host name and this machine's resolver, not
// at the server.
func dialAdvice(err error) string {
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return "the host name did not resolve: check it in --endpoint or S3_ENDPOINT_URL, and this machine's DNS"
	}
	return "check --endpoint or S3_ENDPOINT_URL, and that the server is up"
}

// ErrorCode returns the S3 error code (AccessDenied, NoSuchBucket...) in
// err's chain, "" if there is none: for callers that sort failures, such
// as ferry doctor, without the SDK's types.
func ErrorCode(err error) string { return errorCode(err) }
