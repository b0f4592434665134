package s3proxy_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/ferrylabs/ferry/internal/s3proxy"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/internal/store/storetest"
	"github.com/ferrylabs/ferry/internal/storecheck"
)

// TestIgnoreConditions: with the rule, the real server carries out
// conditional writes unconditionally (the object is replaced), as a store
// that does not implement them would; storecheck sees it and says so.
func TestIgnoreConditions(t *testing.T) {
	t.Parallel()
	f := newFixture(t, s3proxy.Config{Rules: []s3proxy.Rule{{Ops: []string{s3proxy.OpPutObject}, Action: s3proxy.IgnoreConditions()}}})
	st := f.store(t)
	put := func(data string, opts store.PutOptions) (store.ObjectInfo, error) {
		return st.Put(t.Context(), "k", bytes.NewReader([]byte(data)), int64(len(data)), opts)
	}
	first, err := put("first", store.PutOptions{IfNoneMatch: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := put("second", store.PutOptions{IfNoneMatch: true}); err != nil {
		t.Fatalf("a create-only PUT of an existing key through IgnoreConditions: %v; want it carried out", err)
	}
	if got := storetest.MustGet(t, f.direct(t), "k", 0, -1); string(got) != "second" {
		t.Fatalf("the server holds %q, want the second write's bytes", got)
	}
	if _, err := put("third", store.PutOptions{IfMatch: first.ETag}); err != nil {
		t.Fatalf("a PUT with a stale If-Match through IgnoreConditions: %v", err)
	}
	if got := storetest.MustGet(t, f.direct(t), "k", 0, -1); string(got) != "third" {
		t.Fatalf("the server holds %q, want the third write's bytes", got)
	}
	for _, r := range f.px.Requests() {
		if r.Op == s3proxy.OpPutObject && (r.Status != 200 || r.Fault != "ignore If-None-Match and If-Match") {
			t.Errorf("request %v: want 200 with the fault recorded", r)
		}
	}

	target := storecheck.Target{Endpoint: f.view.Endpoint, Bucket: f.bucket, Prefix: "run"}
	err = storecheck.ConditionalWrites(t.Context(), st, target)
	if !errors.Is(err, storecheck.ErrNotEnforced) || !strings.Contains(err.Error(), "ignores If-None-Match: *") {
		t.Fatalf("storecheck through IgnoreConditions: %v", err)
	}
	// Without the rule the same server passes.
	if err := f.px.SetRules(); err != nil {
		t.Fatal(err)
	}
	if err := storecheck.ConditionalWrites(t.Context(), st, target); err != nil {
		t.Fatalf("storecheck against versitygw: %v", err)
	}
	var left []string
	_ = f.direct(t).List(t.Context(), "run/", "", 0, func(o store.ObjectInfo) error { left = append(left, o.Key); return nil })
	if len(left) != 0 {
		t.Errorf("storecheck left %q in the bucket", left)
	}
}
