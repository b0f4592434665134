package s3proxy

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// conditionHeaders are the preconditions of a write that IgnoreConditions
// drops.
var conditionHeaders = []string{"If-None-Match", "If-Match"}

// IgnoreConditions forwards a write without its If-None-Match and If-Match
// headers, so that the server carries it out unconditionally: a store that
// does not implement conditional writes (AWS S3 before August 2024, older
// releases of several S3-compatible servers), which answers 200 and
// replaces the object where it should have answered 412. The headers are
// signed, so the proxy signs the request again with Config.Credentials;
// without them it answers 500.
func IgnoreConditions() Action { return Action{kind: actIgnoreConditions} }

// Credentials are what the proxy signs a request it changed with: the
// server's own.
type Credentials struct {
	AccessKey, SecretKey, Region string
}

// dropConditions removes the preconditions from out, a request on its way
// to the server, and signs it again as the client signed it: for the
// proxy's Host and the client's escaped path.
func (p *Proxy) dropConditions(ex *exchange, out *http.Request) error {
	c := p.creds
	if c.AccessKey == "" || c.SecretKey == "" {
		return fmt.Errorf("IgnoreConditions needs Config.Credentials to sign the changed request")
	}
	for _, h := range conditionHeaders {
		out.Header.Del(h)
	}
	out.Header.Del("Authorization")
	payload := out.Header.Get("X-Amz-Content-Sha256")
	if payload == "" {
		payload = "UNSIGNED-PAYLOAD"
		out.Header.Set("X-Amz-Content-Sha256", payload)
	}
	// The signer reads the path from URL and the host from Host; it writes
	// Authorization and X-Amz-Date into the header, shared with out.
	signed := &http.Request{
		Method: out.Method, Header: out.Header, Host: ex.r.Host, ContentLength: ex.r.ContentLength,
		URL: &url.URL{Scheme: "http", Host: ex.r.Host, Path: ex.r.URL.Path, RawPath: ex.rawPath, RawQuery: ex.r.URL.RawQuery},
	}
	signer := v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true })
	err := signer.SignHTTP(ex.r.Context(), aws.Credentials{AccessKeyID: c.AccessKey, SecretAccessKey: c.SecretKey},
		signed, payload, "s3", c.Region, time.Now().UTC())
	if err != nil {
		return fmt.Errorf("sign the request again: %w", err)
	}
	return nil
}

// conditional reports whether the request carries a precondition.
func conditional(h http.Header) bool {
	for _, name := range conditionHeaders {
		if strings.TrimSpace(h.Get(name)) != "" {
			return true
		}
	}
	return false
}
