package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferrylabs/ferry/internal/s3proxy"
	"github.com/ferrylabs/ferry/internal/s3test"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/manifest"
)

// ignoringStore is the shared server behind a proxy that carries out every
// conditional PUT unconditionally, as a store without conditional writes.
func ignoringStore(t *testing.T) (*s3test.Server, *s3proxy.Proxy, string) {
	t.Helper()
	srv := s3test.Shared(t)
	view, px := srv.WithProxy(t, s3proxy.Config{Rules: []s3proxy.Rule{{Ops: []string{s3proxy.OpPutObject}, Action: s3proxy.IgnoreConditions()}}})
	return view, px, view.NewBucket(t)
}

// bucketKeys lists every object of bucket on srv.
func bucketKeys(t *testing.T, srv *s3test.Server, bucket string) []string {
	t.Helper()
	var keys []string
	if err := srv.Store(t, bucket).List(t.Context(), "", "", 0, func(o store.ObjectInfo) error {
		keys = append(keys, o.Key)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return keys
}

// refusedOneLine checks that r failed with one line naming the store and
// what it ignores.
func refusedOneLine(t *testing.T, what string, r result, bucket string) {
	t.Helper()
	line := strings.TrimSpace(r.stderr)
	if r.code != exitFailure || strings.Contains(line, "\n") ||
		!containsAll(line, "ferry: ", `bucket "`+bucket+`"`, "does not enforce conditional writes", "ignores If-None-Match: *",
			"overwritten", "nothing was written", "--unsafe-unconditional") {
		t.Errorf("%s on a store that ignores conditional writes: exit %d, stderr %q; want exit 1 and one line naming the store, what it ignores and what would be unsafe",
			what, r.code, r.stderr)
	}
}

// TestConditionalWritesIgnored: push, the agent and copy refuse a store
// that ignores conditional writes before writing anything, with one line.
func TestConditionalWritesIgnored(t *testing.T) {
	view, _, bucket := ignoringStore(t)
	src := t.TempDir()
	writeFile(t, filepath.Join(src, "model.pt"), randomBytes(1000, 1))
	url := "s3://" + bucket + "/run"

	r := ferry(t, view, "push", "--to", url, "--step", "1", "--quiet", "--state-dir", t.TempDir(), src)
	refusedOneLine(t, "push", r, bucket)
	if keys := bucketKeys(t, view, bucket); len(keys) != 0 {
		t.Fatalf("push wrote %q to a store that ignores conditional writes", keys)
	}

	watch := t.TempDir()
	writeFile(t, filepath.Join(watch, "step-5", "model.pt"), randomBytes(1000, 2))
	r = ferry(t, view, "agent", "--watch", watch, "--to", url, "--quiet", "--state-dir", t.TempDir(), "--metrics-addr", "off")
	refusedOneLine(t, "agent", r, bucket)
	if keys := bucketKeys(t, view, bucket); len(keys) != 0 {
		t.Fatalf("the agent wrote %q to a store that ignores conditional writes", keys)
	}

	// copy from a good store to the ignoring one.
	srv := s3test.Shared(t)
	from := "s3://" + srv.NewBucket(t) + "/run"
	ferry(t, srv, "push", "--to", from, "--step", "1", "--quiet", "--state-dir", t.TempDir(), src).must(t, 0)
	r = ferry(t, view, "copy", "--from", from, "--to", url, "--quiet")
	refusedOneLine(t, "copy", r, bucket)
	if keys := bucketKeys(t, view, bucket); len(keys) != 0 {
		t.Fatalf("copy wrote %q to a store that ignores conditional writes", keys)
	}

	// The override: one writer, told what it risks.
	r = ferry(t, view, "push", "--to", url, "--step", "1", "--unsafe-unconditional", "--state-dir", t.TempDir(), src).must(t, 0)
	if !containsAll(r.stderr, "WARN", "writing anyway", "ignores If-None-Match: *") {
		t.Errorf("push --unsafe-unconditional did not warn:\n%s", r.stderr)
	}
	keys := bucketKeys(t, view, bucket)
	if !strings.Contains(strings.Join(keys, " "), manifest.ManifestKey("run", 1)) {
		t.Errorf("push --unsafe-unconditional committed nothing: %q", keys)
	}
	for _, k := range keys {
		if strings.HasPrefix(k, manifest.ScratchPrefix("run")) {
			t.Errorf("the check left %s behind", k)
		}
	}
	r = ferry(t, view, "push", "--to", url, "--step", "2", "--nodes", "2", "--node-rank", "0", "--unsafe-unconditional", src).must(t, exitUsage)
	if !strings.Contains(r.stderr, "create-only") {
		t.Errorf("--unsafe-unconditional with 2 nodes: %q", r.stderr)
	}
}

// TestConditionalWritesCheckedOnce: the check runs before the first push
// to a store and not again with the same state dir; it leaves nothing in
// the bucket.
func TestConditionalWritesCheckedOnce(t *testing.T) {
	srv := s3test.Shared(t)
	view, px := srv.WithProxy(t, s3proxy.Config{})
	bucket := view.NewBucket(t)
	url := "s3://" + bucket + "/run"
	src, state := t.TempDir(), t.TempDir()
	writeFile(t, filepath.Join(src, "model.pt"), randomBytes(1000, 1))
	scratchWrites := func() int {
		n := 0
		for _, r := range px.Requests() {
			// Not counting 429s: behind the R2 rules a second write
			// to a key within a second is throttled and sent again.
			if strings.HasPrefix(r.Key, manifest.ScratchPrefix("run")) && r.Op == s3proxy.OpPutObject && r.Status != 429 {
				n++
			}
		}
		return n
	}
	px.Reset()
	ferry(t, view, "push", "--to", url, "--step", "1", "--state-dir", state, src).must(t, 0)
	if n := scratchWrites(); n != 4 {
		t.Errorf("first push: %d PUTs of scratch objects, want 4 (two keys, each written and then refused once)", n)
	}
	px.Reset()
	ferry(t, view, "push", "--to", url, "--step", "2", "--state-dir", state, src).must(t, 0)
	if n := scratchWrites(); n != 0 {
		t.Errorf("second push with the same state dir: %d PUTs of scratch objects, want none (the proof is cached)", n)
	}
	for _, k := range bucketKeys(t, view, bucket) {
		if strings.HasPrefix(k, manifest.ScratchPrefix("run")) {
			t.Errorf("the check left %s behind", k)
		}
	}
}
