package s3test_test

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/ferrylabs/ferry/internal/s3proxy"
	"github.com/ferrylabs/ferry/internal/s3test"
	"github.com/ferrylabs/ferry/internal/store"
)

func TestWithProxy(t *testing.T) {
	srv := s3test.Shared(t)
	view, px := srv.WithProxy(t, s3proxy.Config{})
	if view.Endpoint != px.URL() || view.Endpoint == srv.Endpoint {
		t.Fatalf("view endpoint %s, proxy %s, server %s", view.Endpoint, px.URL(), srv.Endpoint)
	}
	if !slices.Contains(view.Env(), "S3_ENDPOINT_URL="+px.URL()) {
		t.Errorf("Env() = %q does not point at the proxy", view.Env())
	}
	bucket := view.NewBucket(t)
	st := view.Store(t, bucket)
	body := bytes.Repeat([]byte("x"), 3<<20) // over the SDK's 100-continue threshold
	if _, err := st.Put(t.Context(), "k", bytes.NewReader(body), int64(len(body)), store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	// The view's plain client reads what went through the proxy, without
	// asking for 100 Continue.
	if _, err := view.Client(t).HeadObject(t.Context(), &s3.HeadObjectInput{Bucket: aws.String(bucket), Key: aws.String("k")}); err != nil {
		t.Fatal(err)
	}
	counts := px.Counts()
	if counts[s3proxy.OpCreateBucket] != 1 || counts[s3proxy.OpPutObject] != 1 || counts[s3proxy.OpHeadObject] != 1 {
		t.Errorf("counts %v", counts)
	}
	for _, r := range px.Requests() {
		if strings.EqualFold(r.Header.Get("Expect"), "100-continue") {
			t.Errorf("request asked for 100 Continue: %v", r)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("Stop on a proxy view did not panic")
		}
	}()
	view.Stop()
}
