package s3proxy_test

import (
	"bytes"
	"testing"

	"github.com/ferrylabs/ferry/internal/s3proxy"
	"github.com/ferrylabs/ferry/internal/s3store"
	"github.com/ferrylabs/ferry/internal/s3test"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/internal/store/storetest"
)

func TestMain(m *testing.M) { s3test.Main(m) }

// fixture is a bucket on the shared server with a proxy in front.
type fixture struct {
	srv    *s3test.Server // the server itself
	view   *s3test.Server // the server through the proxy
	px     *s3proxy.Proxy
	bucket string
}

// newFixture starts a proxy with cfg in front of the shared server and
// makes a bucket through it, then clears the counts. The proxy's seed is
// logged, so a failure drawn from a probability can be replayed.
func newFixture(t *testing.T, cfg s3proxy.Config) *fixture {
	t.Helper()
	srv := s3test.Shared(t)
	view, px := srv.WithProxy(t, cfg)
	t.Logf("s3proxy seed %d", px.Seed())
	f := &fixture{srv: srv, view: view, px: px, bucket: view.NewBucket(t)}
	px.Reset()
	return f
}

// store returns a store that goes through the proxy.
func (f *fixture) store(t *testing.T) *s3store.Store { return f.view.Store(t, f.bucket) }

// direct returns a store that bypasses the proxy.
func (f *fixture) direct(t *testing.T) *s3store.Store { return f.srv.Store(t, f.bucket) }

// uploadParts uploads data in parts of partSize through st and returns the
// upload ID and parts, without completing.
func uploadParts(t *testing.T, st store.Store, key string, data []byte, partSize int) (string, []store.Part) {
	t.Helper()
	id, err := st.CreateMultipart(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	var parts []store.Part
	for off, n := 0, int32(1); off < len(data); off, n = off+partSize, n+1 {
		c := data[off:min(off+partSize, len(data))]
		p, err := st.UploadPart(t.Context(), key, id, n, bytes.NewReader(c), int64(len(c)), store.CRC32C(c))
		if err != nil {
			t.Fatalf("upload part %d: %v", n, err)
		}
		parts = append(parts, p)
	}
	return id, parts
}

func put(t *testing.T, st store.Store, key string, data []byte) {
	t.Helper()
	if _, err := st.Put(t.Context(), key, bytes.NewReader(data), int64(len(data)), store.PutOptions{CRC32C: store.CRC32C(data)}); err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
}

var randomBytes = storetest.RandomBytes
