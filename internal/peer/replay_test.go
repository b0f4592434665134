package peer

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/manifest"
	"github.com/ferrylabs/ferry/restore"
)

// A signed request is good once, for the node it names, near the time it
// was signed: a captured request replayed, sent to another node, or sent
// late is refused, and the refusal tells nothing (no clock skew).
func TestReplayedRequestIsRefused(t *testing.T) {
	st, _ := step(t, 1000)
	addrs := freeAddrs(t, 2)
	for i, addr := range addrs {
		n, err := Start(Config{Bucket: st, Key: testKey, Listener: listen(t, addr), Peers: addrs, Self: i, SpoolDir: t.TempDir(), Wait: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		defer n.Close()
		go func() {
			_, _ = n.Join(t.Context(), restore.PeerRequest{Step: 1, Chunk: 1 << 20, Fetch: []manifest.File{{Key: "run/data/x", Size: 10}}, Dir: t.TempDir()})
		}()
	}
	send := func(req *http.Request, to string) (int, string) {
		t.Helper()
		r := req.Clone(t.Context())
		r.URL.Host = to // the connection; the Host header stays what was signed
		resp, err := http.DefaultTransport.RoundTrip(r)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	signed := func(host string, at time.Time) *http.Request {
		req, _ := http.NewRequest(http.MethodGet, "http://"+host+"/v1/plan?from=x&nonce="+newNonce(), nil)
		req.Host = host
		sign(req, testKey, at)
		return req
	}
	// A fresh request is answered once the node has its plan (Join runs
	// beside); it returns the request answered.
	fresh := func(host string) *http.Request {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			req := signed(host, time.Now())
			code, _ := send(req, host)
			if code == http.StatusOK {
				return req
			}
			if code != http.StatusServiceUnavailable || time.Now().After(deadline) {
				t.Fatalf("%s answers a fresh request with %d", host, code)
			}
		}
	}
	req := fresh(addrs[0])
	for _, tc := range []struct {
		name string
		req  *http.Request
		to   string
	}{
		{"replayed", req, addrs[0]},
		{"for another node", signed(addrs[0], time.Now()), addrs[1]},
		{"two minutes old", signed(addrs[0], time.Now().Add(-2*time.Minute)), addrs[0]},
		{"two minutes ahead", signed(addrs[0], time.Now().Add(2*time.Minute)), addrs[0]},
	} {
		code, body := send(tc.req, tc.to)
		if code != http.StatusUnauthorized {
			t.Errorf("%s: %d, want 401", tc.name, code)
		}
		if strings.Contains(body, "clock") || strings.Contains(body, "m0s") || strings.Contains(body, "nonce") {
			t.Errorf("%s: the refusal says why: %q", tc.name, body)
		}
	}
	fresh(addrs[1])
}

// A nonce is remembered for at least two windows after it is first seen
// (a request is accepted until its time is a window old, and it may
// arrive a window early), and forgotten after four.
func TestNoncesRemembered(t *testing.T) {
	var c nonces
	t0 := time.Unix(1_000_000, 0)
	if !c.add("a", t0) || c.add("a", t0) {
		t.Fatal("a new nonce, then the same again")
	}
	for _, d := range []time.Duration{time.Second, authWindow, 2*authWindow - time.Second, 2 * authWindow, 3 * authWindow} {
		if c.add("a", t0.Add(d)) {
			t.Fatalf("nonce forgotten %s after it was seen", d)
		}
	}
	var fresh nonces
	fresh.add("b", t0)
	fresh.add("c", t0.Add(2*authWindow)) // rotates: b is in the old generation
	if !fresh.add("b", t0.Add(5*authWindow)) {
		t.Fatal("a nonce is remembered forever")
	}
}
