package s3store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/internal/s3test"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/internal/store/storetest"
	"github.com/ferrylabs/ferry/internal/storecheck"
)

// TestEndpointStoreSuite runs the store suite and the conditional-write
// check against a real endpoint (make test-endpoint; skipped unless
// FERRY_TEST_S3_ENDPOINT and FERRY_TEST_S3_BUCKET are set), each subtest
// under a fresh prefix of the bucket, all deleted at the end.
func TestEndpointStoreSuite(t *testing.T) {
	e := s3test.RealEndpoint(t)
	st := e.Store(t)
	t.Logf("endpoint %s, bucket %s, prefix %s", e.URL, e.Bucket, e.Prefix)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := storetest.Clear(ctx, st, e.Prefix+"/"); err != nil {
			t.Errorf("clean up %s: %v", e.Prefix, err)
		}
	})
	if err := storecheck.ConditionalWrites(t.Context(), st, storecheck.Target{Endpoint: e.URL, Bucket: e.Bucket, Prefix: e.Prefix}); err != nil {
		t.Errorf("conditional writes: %v", err)
	}
	n := 0
	storetest.Run(t, func(t *testing.T) store.Store {
		n++
		return storetest.Prefixed(st, fmt.Sprintf("%s/suite-%d/", e.Prefix, n))
	}, storetest.PartChecksumsOptional())
}
