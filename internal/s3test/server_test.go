package s3test_test

import (
	"bytes"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/ferrylabs/ferry/internal/s3store"
	"github.com/ferrylabs/ferry/internal/s3test"
	"github.com/ferrylabs/ferry/internal/store"
)

func TestMain(m *testing.M) { s3test.Main(m) }

func TestRestartKeepsData(t *testing.T) {
	srv := s3test.Start(t)
	bucket := srv.NewBucket(t)
	st := srv.Store(t, bucket)
	put := func(key string) {
		t.Helper()
		if _, err := st.Put(t.Context(), key, bytes.NewReader([]byte(key)), int64(len(key)), store.PutOptions{}); err != nil {
			t.Fatalf("put %s: %v", key, err)
		}
	}
	put("before")
	endpoint := srv.Endpoint

	srv.Restart(t)
	if srv.Endpoint != endpoint {
		t.Errorf("endpoint changed from %s to %s", endpoint, srv.Endpoint)
	}
	// The store's idle connection died with the old process: the next
	// request must still succeed.
	put("after-restart")

	srv.Kill()
	once := srv.StoreWith(t, s3store.Config{Bucket: bucket, MaxAttempts: 1})
	if _, err := once.Head(t.Context(), "before"); err == nil {
		t.Error("Head succeeded while the server was down")
	}
	srv.Restart(t)
	put("after-kill")

	var keys []string
	if err := st.List(t.Context(), "", "", 0, func(o store.ObjectInfo) error {
		keys = append(keys, o.Key)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if want := []string{"after-kill", "after-restart", "before"}; !slices.Equal(keys, want) {
		t.Errorf("listed %q, want %q", keys, want)
	}
	srv.Stop()
	srv.Stop() // stopping twice is harmless
}

func TestShared(t *testing.T) {
	a, b := s3test.Shared(t), s3test.Shared(t)
	if a != b {
		t.Fatal("Shared returned two servers")
	}
	b1, b2 := a.NewBucket(t), a.NewBucket(t)
	if b1 == b2 || len(b1) > 63 || strings.ToLower(b1) != b1 {
		t.Errorf("buckets %q and %q: want distinct valid names", b1, b2)
	}
	defer func() {
		if recover() == nil {
			t.Error("Stop on the shared server did not panic")
		}
	}()
	a.Stop()
}

func TestEnv(t *testing.T) {
	srv := s3test.Shared(t)
	env := strings.Join(srv.Env(), "\n")
	for _, want := range []string{
		"AWS_ACCESS_KEY_ID=" + srv.AccessKey,
		"AWS_SECRET_ACCESS_KEY=" + srv.SecretKey,
		"AWS_REGION=" + srv.Region,
		"S3_ENDPOINT_URL=" + srv.Endpoint,
	} {
		if !strings.Contains(env, want) {
			t.Errorf("Env() lacks %s", want)
		}
	}
}

func TestTLS(t *testing.T) {
	srv := s3test.Start(t, s3test.WithTLS())
	if !strings.HasPrefix(srv.Endpoint, "https://") || srv.CAFile == "" {
		t.Fatalf("endpoint %s, CA file %q", srv.Endpoint, srv.CAFile)
	}
	if !slices.Contains(srv.Env(), "AWS_CA_BUNDLE="+srv.CAFile) {
		t.Error("Env() lacks AWS_CA_BUNDLE")
	}
	st := srv.Store(t, srv.NewBucket(t))
	if _, err := st.Put(t.Context(), "k", bytes.NewReader([]byte("tls")), 3, store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	rc, err := st.Get(t.Context(), "k", 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if b, _ := io.ReadAll(rc); string(b) != "tls" {
		t.Errorf("read %q", b)
	}
}
