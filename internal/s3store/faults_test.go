package s3store_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/internal/s3store"
	"github.com/ferrylabs/ferry/internal/s3test"
	"github.com/ferrylabs/ferry/internal/store"
)

// putGet writes data at key through st and reads it back.
func putGet(ctx context.Context, st *s3store.Store, key string, data []byte) ([]byte, error) {
	if _, err := st.Put(ctx, key, bytes.NewReader(data), int64(len(data)), store.PutOptions{}); err != nil {
		return nil, err
	}
	rc, err := st.Get(ctx, key, 0, -1)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

// A host clock 20 minutes behind: the server refuses the first signature
// (RequestTimeTooSkewed, or 403 with the server's Date), the SDK's clock
// skew correction learns the offset from the answer's Date header and
// signs the retry with the server's time: the PUT and the GET succeed.
func TestClockSkewCorrected(t *testing.T) {
	srv := s3test.Shared(t)
	bucket := srv.NewBucket(t)
	for _, off := range []time.Duration{-20 * time.Minute, 20 * time.Minute} {
		var attempts atomic.Int64
		cfg := s3store.WithClockOffset(s3store.Config{Bucket: bucket, OnRequest: func(string) { attempts.Add(1) }}, off)
		st := srv.StoreWith(t, cfg)
		data := []byte("checkpoint bytes signed by a host whose clock is off")
		// One key per offset: R2 allows one write per key per second, and
		// a 429 for that would be counted here as a refusal for skew.
		got, err := putGet(context.Background(), st, "skew"+off.String(), data)
		if err != nil {
			t.Fatalf("clock off by %v: %v", off, err)
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("clock off by %v: read back %q", off, got)
		}
		// One refused attempt, then every request signed right: the test
		// proves nothing unless the server refused the skewed signature.
		if n := attempts.Load(); n != 3 {
			t.Errorf("clock off by %v: %d attempts for a PUT and a GET, want 3 (one refused for skew)", off, n)
		}
	}
}

// The endpoint's name does not resolve for a minute (a dialer that answers
// NXDOMAIN: tests may not edit /etc/hosts, so the resolver is the seam).
// Every request meanwhile fails at once with one line naming the host and
// the cause; the caller (the agent retries its step with a backoff) keeps
// trying, and the first request after the name resolves again succeeds on
// the same Store.
func TestDNSOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("a minute of DNS outage")
	}
	srv := s3test.Shared(t)
	bucket := srv.NewBucket(t)
	u, err := url.Parse(srv.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	const host = "s3.ferry.invalid"
	_, port, _ := net.SplitHostPort(u.Host)
	outage := time.Minute
	resolvesAt := time.Now().Add(outage)
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		if h, _, _ := net.SplitHostPort(addr); h != host {
			t.Errorf("dialled %s, want %s", addr, host)
		}
		if time.Now().Before(resolvesAt) {
			return nil, &net.OpError{Op: "dial", Net: network, Err: &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}}
		}
		var d net.Dialer
		return d.DialContext(ctx, network, net.JoinHostPort("127.0.0.1", port))
	}
	st := srv.StoreWith(t, s3store.WithDial(s3store.Config{Bucket: bucket, Endpoint: "http://" + net.JoinHostPort(host, port)}, dial))
	data := []byte("a step saved while DNS was down")
	failures := 0
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		start := time.Now()
		got, err := putGet(ctx, st, "dns", data)
		cancel()
		if err == nil {
			if !bytes.Equal(got, data) {
				t.Fatalf("read back %q", got)
			}
			break
		}
		if time.Since(start) > 2*time.Second {
			t.Errorf("a request with an unresolvable endpoint took %v: want a fast failure, the caller retries", time.Since(start))
		}
		if !strings.Contains(err.Error(), "cannot connect to http://"+host) || !strings.Contains(err.Error(), "no such host") ||
			!strings.Contains(err.Error(), "host name did not resolve") {
			t.Fatalf("error %q: want it to name the endpoint and the DNS failure, and point at the name, not the server", err)
		}
		var ue interface{ UserReason() string }
		if !errors.As(err, &ue) || ue.UserReason() == "" {
			t.Errorf("error %q carries no reason for the user", err)
		}
		if failures++; failures == 1 {
			t.Logf("during the outage: %v", err)
		}
		if time.Now().After(resolvesAt.Add(10 * time.Second)) {
			t.Fatalf("still failing 10 s after the name resolves again: %v", err)
		}
		time.Sleep(2 * time.Second)
	}
	if failures < 20 {
		t.Fatalf("%d failures: the outage did not last", failures)
	}
	t.Logf("%d failed tries over the %v outage, then success", failures, outage)
}

// A server that refuses every signature as too far from its clock, even
// after the SDK's correction from its Date header (a host clock the
// correction cannot bring in, or a proxy in between that keeps its own):
// one line saying the clock is wrong and what to do, not the SDK's text.
func TestClockSkewRefusedSaysSo(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(http.StatusForbidden)
		io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>RequestTimeTooSkewed</Code>`+
			`<Message>The difference between the request time and the current time is too large.</Message></Error>`)
	}))
	t.Cleanup(srv.Close)
	st, err := s3store.New(t.Context(), s3store.Config{Endpoint: srv.URL, Region: "us-east-1", Bucket: "b",
		AccessKeyID: "AKIDEXAMPLE", SecretAccessKey: "secret", MaxAttempts: 2})
	if err != nil {
		t.Fatal(err)
	}
	data := []byte("a step")
	_, err = st.Put(t.Context(), "k", bytes.NewReader(data), int64(len(data)), store.PutOptions{})
	want := "this host's clock differs from " + srv.URL + "'s by more than the 15 minutes S3 allows (RequestTimeTooSkewed): set the clock right"
	var ur interface{ UserReason() string }
	if !errors.As(err, &ur) || !strings.HasPrefix(ur.UserReason(), want) {
		t.Fatalf("put refused for clock skew: %v\nwant the reason %q", err, want)
	}
}
