package doctor

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/ferrylabs/ferry/internal/s3store"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/internal/storecheck"
)

// Remote runs the checks of the endpoint and the bucket in order. Once
// the endpoint, the credentials or the bucket fail, the checks that need
// them are skipped.
func Remote(ctx context.Context, cfg Config) []Result {
	if cfg.Credentials == nil {
		return folder(ctx, cfg)
	}
	ep, serverDate, rtt := endpointCheck(ctx, cfg)
	rs := []Result{ep, clockCheck(ep, serverDate, rtt)}
	if ep.Status == Fail {
		return append(rs, skipAll("the endpoint does not answer", append([]string{"credentials", "bucket"}, bucketChecks...)...)...)
	}
	cred := credentialsCheck(ctx, cfg)
	if cred.Status == Fail {
		return append(append(rs, cred), skipAll("no credentials", append([]string{"bucket"}, bucketChecks...)...)...)
	}
	cred, bucket := bucketCheck(ctx, cfg, cred)
	rs = append(rs, cred, bucket)
	if cred.Status == Fail || bucket.Status == Fail {
		return append(rs, skipAll("the bucket cannot be listed", bucketChecks...)...)
	}
	rs = append(rs, permissions(ctx, cfg)...)
	return append(rs, conditionalCheck(ctx, cfg))
}

// bucketChecks are the checks that need a bucket to write to, in order.
var bucketChecks = []string{"write (PUT)", "read (GET)", "list", "multipart", "delete", "conditional writes"}

// folder runs the checks of a file:// destination: no endpoint, clock or
// credentials; the folder must list, and take writes as a bucket would.
func folder(ctx context.Context, cfg Config) []Result {
	rs := skipAll("a folder (file://), not an S3 endpoint", "endpoint", "clock", "credentials")
	err := cfg.Store.List(ctx, cfg.Prefix, "", 1, func(store.ObjectInfo) error { return nil })
	if err != nil {
		rs = append(rs, fail("bucket", "create the folder, or fix --to (FERRY_TO)", "folder %s: %v", cfg.Bucket, err))
		return append(rs, skipAll("the folder cannot be listed", bucketChecks...)...)
	}
	rs = append(rs, ok("bucket", "folder %s lists", cfg.Bucket))
	rs = append(rs, permissions(ctx, cfg)...)
	return append(rs, conditionalCheck(ctx, cfg))
}

// Unopened is the result of the store checks when the destination could not
// even be opened (a folder that does not exist or cannot be read, an
// endpoint or CA bundle the SDK refuses): one fail line saying why, the
// other store checks skipped, so that the local checks still run.
func Unopened(err error) []Result {
	rs := []Result{fail("destination", "", "%v", err)} // its text says what to fix
	return append(rs, skipAll("the destination cannot be opened", append([]string{"bucket"}, bucketChecks...)...)...)
}

func skipAll(why string, checks ...string) []Result {
	out := make([]Result, len(checks))
	for i, c := range checks {
		out[i] = skip(c, why)
	}
	return out
}

// endpointURL is the URL the endpoint check asks: the endpoint, or AWS
// S3's regional one.
func endpointURL(cfg Config) string {
	if cfg.Endpoint != "" {
		return cfg.Endpoint
	}
	if cfg.Region != "" && cfg.Region != "auto" {
		return "https://s3." + cfg.Region + ".amazonaws.com"
	}
	return "https://s3.amazonaws.com"
}

// endpointCheck sends one unsigned GET to the endpoint: any HTTP answer
// proves the name resolves, the port answers and TLS verifies. It returns
// the server's Date and the round trip, for the clock check.
func endpointCheck(ctx context.Context, cfg Config) (Result, time.Time, time.Duration) {
	const check = "endpoint"
	raw := endpointURL(cfg)
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fail(check, "set --endpoint (FERRY_ENDPOINT or S3_ENDPOINT_URL) to the S3 API URL, e.g. https://ACCOUNT.r2.cloudflarestorage.com",
			"%q is not an http(s) URL", raw), time.Time{}, 0
	}
	client, err := httpClient(cfg.CABundle)
	if err != nil {
		return fail(check, "point AWS_CA_BUNDLE at a PEM file of the CA that signed the server's certificate", "%v", err), time.Time{}, 0
	}
	rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(rctx, http.MethodGet, raw, nil)
	start := time.Now()
	resp, err := client.Do(req)
	rtt := time.Since(start)
	if err != nil {
		return endpointError(raw, err), time.Time{}, 0
	}
	resp.Body.Close()
	date, _ := http.ParseTime(resp.Header.Get("Date"))
	how := "plain HTTP"
	if resp.TLS != nil {
		how = tls.VersionName(resp.TLS.Version) + ", certificate verified"
	}
	if u.Scheme == "http" && !loopback(u.Hostname()) {
		return warn(check, "use the https:// endpoint", "%s answers (HTTP %d) over plain HTTP: checkpoints and request signatures cross the network unencrypted",
			raw, resp.StatusCode), date, rtt
	}
	return ok(check, "%s answers (HTTP %d, %s) in %v", raw, resp.StatusCode, how, rtt.Round(time.Millisecond)), date, rtt
}

func endpointError(raw string, err error) Result {
	const check = "endpoint"
	var uerr x509.UnknownAuthorityError
	var herr x509.HostnameError
	var cerr *tls.CertificateVerificationError
	var dnsErr *net.DNSError
	switch {
	case errors.As(err, &uerr), errors.As(err, &cerr):
		return fail(check, "set AWS_CA_BUNDLE to the CA certificate that signed the server's (a private CA), or fix the endpoint", "%s: TLS certificate not trusted: %v", raw, err)
	case errors.As(err, &herr):
		return fail(check, "use the host name the certificate is for in --endpoint", "%s: TLS certificate is for another host: %v", raw, err)
	case errors.As(err, &dnsErr):
		return fail(check, "check the host name in --endpoint (FERRY_ENDPOINT, S3_ENDPOINT_URL) and DNS", "%s: name does not resolve: %v", raw, err)
	}
	return fail(check, "check --endpoint (FERRY_ENDPOINT, S3_ENDPOINT_URL), that the server is up, and proxies or firewalls between", "%s: no answer: %v", raw, err)
}

// httpClient trusts the system's CAs and, when set, AWS_CA_BUNDLE's, as
// the SDK does.
func httpClient(bundle string) (*http.Client, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if bundle != "" {
		pem, err := os.ReadFile(bundle)
		if err != nil {
			return nil, fmt.Errorf("AWS_CA_BUNDLE: %w", err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("AWS_CA_BUNDLE %s: no PEM certificate in it", bundle)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}, nil
}

func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Clock skew limits: S3 refuses a request signed more than 15 minutes off
// (RequestTimeTooSkewed); a minute already skews the settle windows and
// prune's grace period as seen from the bucket.
const (
	skewWarn = time.Minute
	skewFail = 10 * time.Minute
)

func clockCheck(ep Result, server time.Time, rtt time.Duration) Result {
	const check = "clock"
	switch {
	case ep.Status == Fail:
		return skip(check, "the endpoint does not answer")
	case server.IsZero():
		return warn(check, "", "the server's answer has no Date header: skew unknown")
	}
	// The server stamped its Date about half a round trip before the
	// answer arrived; Date has a resolution of a second.
	skew := time.Since(server.Add(rtt / 2)).Round(time.Second)
	abs := max(skew, -skew)
	fix := "synchronise this host's clock (chrony or systemd-timesyncd)"
	switch {
	case abs > skewFail:
		return fail(check, fix, "%v off the server's clock: signed requests are refused beyond 15 minutes (RequestTimeTooSkewed)", skew)
	case abs > skewWarn:
		return warn(check, fix, "%v off the server's clock", skew)
	}
	return ok(check, "within %v of the server's clock (its Date header)", max(abs, time.Second))
}

func credentialsCheck(ctx context.Context, cfg Config) Result {
	src, err := cfg.Credentials(ctx)
	if err != nil {
		const fix = "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE (--profile)"
		if strings.Contains(err.Error(), "no EC2 IMDS role found") {
			// The whole chain came up empty: the SDK's text names only its
			// last link, the instance role, which misleads more than it tells.
			return fail("credentials", fix, "no usable AWS credentials found (not in the environment, the shared "+
				"credentials or config files, nor an instance role)")
		}
		return fail("credentials", fix, "none usable: %v", err)
	}
	return ok("credentials", "found (%s)", src)
}

// bucketCheck lists one key under the prefix: the first signed request,
// so it also tells whether the server accepts the credentials.
func bucketCheck(ctx context.Context, cfg Config, cred Result) (Result, Result) {
	err := cfg.Store.List(ctx, cfg.Prefix, "", 1, func(store.ObjectInfo) error { return nil })
	if err == nil {
		cred.Detail += ", accepted by the server"
		return cred, ok("bucket", "%q exists and lists under %q", cfg.Bucket, cfg.Prefix+"/")
	}
	switch code := s3store.ErrorCode(err); {
	case errors.Is(err, store.ErrNoBucket):
		return cred, fail("bucket", "create it, or fix the bucket in --to (FERRY_TO) or the endpoint", "%q does not exist at %s", cfg.Bucket, endpointURL(cfg))
	case code == "InvalidAccessKeyId" || code == "SignatureDoesNotMatch" || code == "XAdminUserNotFound" ||
		code == "ExpiredToken" || code == "InvalidToken" || code == "TokenRefreshRequired":
		return fail("credentials", "set the AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE) that the server issued: it does not accept these",
			"%s but refused by the server (%s)", cred.Detail, code), skip("bucket", "the credentials are refused")
	case errors.Is(err, s3store.ErrAccessDenied):
		return cred, fail("bucket", "grant s3:ListBucket on the bucket (R2: an Object Read & Write token for it)", "listing %q refused: %s", cfg.Bucket, reason(err))
	}
	return cred, fail("bucket", "see the error; ferry doctor --log-level debug shows every attempt", "listing %q failed: %s", cfg.Bucket, reason(err))
}

// reason is the store error's fix when it has one, else its text.
func reason(err error) string {
	var ur interface{ UserReason() string }
	if errors.As(err, &ur) && ur.UserReason() != "" {
		return ur.UserReason()
	}
	return err.Error()
}

func conditionalCheck(ctx context.Context, cfg Config) Result {
	const check = "conditional writes"
	t := storecheck.Target{Endpoint: cfg.Endpoint, Bucket: cfg.Bucket, Prefix: cfg.Prefix}
	if cfg.Credentials == nil {
		t.Endpoint = storecheck.FileEndpoint
	}
	err := storecheck.ConditionalWrites(ctx, cfg.Store, t)
	var left *storecheck.LeftError
	switch {
	case errors.As(err, &left):
		_ = cfg.Cache.Record(t)
		return warn(check, "grant s3:DeleteObject under the prefix, and delete those objects by hand", "%v", err)
	case errors.Is(err, storecheck.ErrNotEnforced):
		_ = cfg.Cache.Forget(t)
		return fail(check, "use a store that enforces conditional writes (docs/compatibility.md), or --unsafe-unconditional while one writer alone writes the prefix", "%v", err)
	case err != nil:
		return fail(check, "see the error", "could not check: %v", err)
	}
	detail := "a second create-only PUT (If-None-Match: *) and a stale If-Match are refused with 412"
	if rerr := cfg.Cache.Record(t); rerr == nil && cfg.Cache.Dir != "" {
		detail += "; recorded for the agent"
	}
	return ok(check, "%s", detail)
}
