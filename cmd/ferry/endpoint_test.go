package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/internal/s3test"
	"github.com/ferrylabs/ferry/internal/store/storetest"
)

// TestEndpointRoundTrip pushes, restores and re-pushes one step through the
// ferry binary against a real endpoint (make test-endpoint; skipped unless
// FERRY_TEST_S3_ENDPOINT and FERRY_TEST_S3_BUCKET are set), under a fresh
// prefix deleted at the end.
func TestEndpointRoundTrip(t *testing.T) {
	e := s3test.RealEndpoint(t)
	st := e.Store(t)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := storetest.Clear(ctx, st, e.Prefix+"/"); err != nil {
			t.Errorf("clean up %s: %v", e.Prefix, err)
		}
	})
	ferryAt := func(args ...string) result {
		t.Helper()
		cmd := ferryCmd(t, nil, args...)
		cmd.Env = append(cmd.Env, e.Env()...)
		return run(t, cmd)
	}
	url := "s3://" + e.Bucket + "/" + e.Prefix
	src := t.TempDir()
	// A multipart file of equal 5 MiB parts and a short last one, and small
	// files packed together.
	writeFile(t, filepath.Join(src, "model.pt"), randomBytes(12*mib+5, 1))
	writeFile(t, filepath.Join(src, "config.json"), randomBytes(300, 2))
	writeFile(t, filepath.Join(src, "rank1", "optim.pt"), randomBytes(2*mib, 3))
	state := t.TempDir()
	ferryAt("push", "--to", url, "--step", "10", "--part-size", "5MiB", "--state-dir", state, src).must(t, 0)
	dst := filepath.Join(t.TempDir(), "restored")
	ferryAt("restore", "--from", url, "--to", dst).must(t, 0)
	sameTree(t, src, dst)
	r := ferryAt("push", "--to", url, "--step", "10", "--part-size", "5MiB", "--state-dir", state, src).must(t, 0)
	if !strings.Contains(r.stdout, "already committed") {
		t.Errorf("re-push of identical content: %q", r.stdout)
	}
	writeFile(t, filepath.Join(src, "config.json"), randomBytes(300, 9))
	r = ferryAt("push", "--to", url, "--step", "10", "--part-size", "5MiB", "--state-dir", state, src)
	if r.code == 0 {
		t.Errorf("re-push of step 10 with other content succeeded: %q", r.stdout)
	}
	ferryAt("verify", "--from", url, "--step", "10", "--read-data").must(t, 0)
}
