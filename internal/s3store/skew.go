package s3store

import (
	"context"
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// skewedSigner signs as a host whose clock is offset from the true time:
// the test seam for a clock 20 minutes off (the SDK's clock skew
// correction must bring the signing time back within the server's 15
// minutes).
type skewedSigner struct {
	s3.HTTPSignerV4
	offset time.Duration
}

// SignHTTP implements s3.HTTPSignerV4.
func (s skewedSigner) SignHTTP(ctx context.Context, creds aws.Credentials, r *http.Request, payloadHash, service, region string,
	signingTime time.Time, optFns ...func(*v4.SignerOptions)) error {
	return s.HTTPSignerV4.SignHTTP(ctx, creds, r, payloadHash, service, region, signingTime.Add(s.offset), optFns...)
}

// skewedClock sees the server's Date header as a host whose clock is off
// by offset would: with skewedSigner, the SDK's whole view of time is off.
type skewedClock struct {
	next   aws.HTTPClient
	offset time.Duration
}

// Do implements aws.HTTPClient.
func (c skewedClock) Do(r *http.Request) (*http.Response, error) {
	resp, err := c.next.Do(r)
	if resp != nil {
		if d, perr := http.ParseTime(resp.Header.Get("Date")); perr == nil {
			resp.Header.Set("Date", d.Add(-c.offset).UTC().Format(http.TimeFormat))
		}
	}
	return resp, err
}

// newSigner is the SDK's default S3 signer.
func newSigner(o s3.Options) s3.HTTPSignerV4 {
	return v4.NewSigner(func(so *v4.SignerOptions) {
		so.Logger = o.Logger
		so.LogSigning = o.ClientLogMode.IsSigning()
		so.DisableURIPathEscaping = true
	})
}
