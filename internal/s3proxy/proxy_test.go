package s3proxy_test

import (
	"bytes"
	"io"
	"net/http"
	"testing"

	"github.com/ferrylabs/ferry/internal/s3proxy"
	"github.com/ferrylabs/ferry/internal/s3test"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/internal/store/storetest"
)

// TestStoreSuiteThroughProxy runs the whole store behaviour suite through
// the proxy: every operation ferry uses must reach the server with its
// SigV4 signature intact (the client signs for the proxy's host:port).
func TestStoreSuiteThroughProxy(t *testing.T) {
	t.Parallel()
	srv := s3test.Shared(t)
	view, px := srv.WithProxy(t, s3proxy.Config{})
	storetest.Run(t, func(t *testing.T) store.Store {
		return view.Store(t, view.NewBucket(t))
	})
	for _, r := range px.Requests() {
		if r.Status == http.StatusForbidden {
			t.Errorf("the server refused a forwarded request: %v", r)
		}
	}
	counts := px.Counts()
	for _, op := range []string{
		s3proxy.OpCreateBucket, s3proxy.OpPutObject, s3proxy.OpGetObject, s3proxy.OpHeadObject,
		s3proxy.OpListObjectsV2, s3proxy.OpDeleteObject, s3proxy.OpCreateMultipartUpload,
		s3proxy.OpUploadPart, s3proxy.OpListParts, s3proxy.OpCompleteMultipartUpload,
		s3proxy.OpAbortMultipartUpload, s3proxy.OpListMultipartUploads,
	} {
		if counts[op] == 0 {
			t.Errorf("no %s request seen; counts %v", op, counts)
		}
	}
}

// TestEscapedKeys checks that keys whose escaping a proxy could normalize
// (and so break the signature) arrive as signed.
func TestEscapedKeys(t *testing.T) {
	t.Parallel()
	f := newFixture(t, s3proxy.Config{})
	st := f.store(t)
	keys := []string{"a b", "plus+sign", "pct%41", "eq=amp&semi;", "utf8/é/日本", "tilde~star*paren()", "dir//double", "q?mark#hash"}
	for _, key := range keys {
		data := []byte(key)
		put(t, st, key, data)
		if got := storetest.MustGet(t, st, key, 0, -1); !bytes.Equal(got, data) {
			t.Errorf("key %q read back %q", key, got)
		}
		rs := f.px.Requests()
		if r := rs[len(rs)-1]; r.Key != key || r.Op != s3proxy.OpGetObject {
			t.Errorf("key %q recorded as %q (%s)", key, r.Key, r.Op)
		}
	}
	if n := f.px.Counts()[s3proxy.OpPutObject]; n != len(keys) {
		t.Errorf("%d PutObject requests, want %d", n, len(keys))
	}
}

// TestCountsAndReset checks the counting a request budget relies on.
func TestCountsAndReset(t *testing.T) {
	t.Parallel()
	f := newFixture(t, s3proxy.Config{})
	st := f.store(t)
	put(t, st, "k", []byte("v"))
	if _, err := st.Head(t.Context(), "k"); err != nil {
		t.Fatal(err)
	}
	rc, err := st.Get(t.Context(), "k", 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, rc)
	rc.Close()
	want := map[string]int{s3proxy.OpPutObject: 1, s3proxy.OpHeadObject: 1, s3proxy.OpGetObject: 1}
	if got := f.px.Counts(); len(got) != len(want) || got[s3proxy.OpPutObject] != 1 || got[s3proxy.OpHeadObject] != 1 || got[s3proxy.OpGetObject] != 1 {
		t.Errorf("counts %v, want %v", got, want)
	}
	rs := f.px.Requests()
	if len(rs) != 3 || rs[0].Status != 200 || rs[0].Bucket != f.bucket || rs[0].Key != "k" || rs[0].ContentLength != 1 {
		t.Errorf("requests %v", rs)
	}
	if rs[0].Header.Get("Authorization") == "" {
		t.Error("recorded headers lack Authorization")
	}
	f.px.Reset()
	if len(f.px.Counts()) != 0 || len(f.px.Requests()) != 0 {
		t.Error("Reset left counts or records")
	}
}
