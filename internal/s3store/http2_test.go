package s3store_test

import (
	"bytes"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/ferrylabs/ferry/internal/s3store"
	"github.com/ferrylabs/ferry/internal/store"
)

// TestHTTPSServerSpeaksHTTP2: a store whose HTTPS listener also speaks
// HTTP/2 (SeaweedFS, MinIO, a CDN edge) gets HTTP/1.1 from ferry, which
// asks for it in the TLS handshake (ALPN). ferry used to offer h2 there,
// without an HTTP/2 client behind it: such a server took h2 and read
// HTTP/1.1 as a broken HTTP/2 preface, and every request was reset.
func TestHTTPSServerSpeaksHTTP2(t *testing.T) {
	var (
		mu     sync.Mutex
		protos []string
		stored []byte
	)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		protos = append(protos, r.Proto)
		mu.Unlock()
		switch r.Method {
		case http.MethodPut:
			b, _ := io.ReadAll(r.Body)
			mu.Lock()
			stored = b
			mu.Unlock()
			w.Header().Set("ETag", `"e"`)
		case http.MethodGet:
			mu.Lock()
			b := stored
			mu.Unlock()
			w.Header().Set("ETag", `"e"`)
			w.Write(b)
		}
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AWS_CA_BUNDLE", ca)
	st, err := s3store.New(t.Context(), s3store.Config{Endpoint: srv.URL, Region: "us-east-1", Bucket: "b",
		AccessKeyID: "AKIDEXAMPLE", SecretAccessKey: "secret", MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	data := []byte("a checkpoint over HTTPS")
	if _, err := st.Put(t.Context(), "k", bytes.NewReader(data), int64(len(data)), store.PutOptions{}); err != nil {
		t.Fatalf("put to a server that speaks HTTP/2 over TLS: %v", err)
	}
	rc, err := st.Get(t.Context(), "k", 0, -1)
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back %q (%v)", got, err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, p := range protos {
		if p != "HTTP/1.1" {
			t.Errorf("a request came as %s: ferry's uploads use one HTTP/1.1 connection per request", p)
		}
	}
}
