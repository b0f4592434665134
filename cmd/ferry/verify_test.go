package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferrylabs/ferry/internal/remote"
	"github.com/ferrylabs/ferry/internal/s3test"
	"github.com/ferrylabs/ferry/internal/verify"
)

// ferry verify: exit 0 on a healthy bucket, with every byte read; exit 1
// with a line naming the file and the problem once an object is deleted;
// --json carries the problems and the requests; exit 3 without a
// committed step; exit 2 on flags that contradict each other.
func TestCLIVerify(t *testing.T) {
	srv := s3test.Shared(t)
	bucket := srv.NewBucket(t)
	url := "s3://" + bucket + "/run"
	ferry(t, srv, "verify", "--from", url).must(t, exitNoCheckpoint)
	src := t.TempDir()
	writeFile(t, filepath.Join(src, "rank0.pt"), randomBytes(6<<20, 1))
	writeFile(t, filepath.Join(src, "rank1.pt"), randomBytes(1000, 2))
	ferry(t, srv, "push", "--to", url, "--step", "10", "--part-size", "5MiB", src).must(t, 0)
	// Step 20 shares rank0.pt's object with step 10 (dedup); rank1.pt is
	// its own.
	writeFile(t, filepath.Join(src, "rank1.pt"), randomBytes(1000, 3))
	ferry(t, srv, "push", "--to", url, "--step", "20", "--part-size", "5MiB", src).must(t, 0)
	r := ferry(t, srv, "verify", "--from", url, "--all", "--read-data").must(t, 0)
	if !strings.Contains(r.stdout, "step 20: ok: 2 files") || !strings.Contains(r.stdout, "step 10: ok: 2 files") || !strings.Contains(r.stdout, "2 read") {
		t.Errorf("verify output:\n%s", r.stdout)
	}

	st := srv.Store(t, bucket)
	m, err := remote.Get(t.Context(), st, "run", 20)
	if err != nil {
		t.Fatal(err)
	}
	var key string
	for _, f := range m.Files {
		if f.Path == "rank1.pt" {
			key = f.Key
		}
	}
	if err := st.Delete(t.Context(), key); err != nil {
		t.Fatal(err)
	}
	r = ferry(t, srv, "verify", "--from", url).must(t, exitFailure)
	if !strings.Contains(r.stdout, "step 20: rank1.pt: missing: no object at "+key) {
		t.Errorf("verify output lacks the missing file:\n%s", r.stdout)
	}
	if !strings.Contains(r.stderr, "step 20 not restorable as recorded") {
		t.Errorf("verify error: %s", r.stderr)
	}
	r = ferry(t, srv, "verify", "--from", url, "--last", "2", "--json").must(t, exitFailure)
	var out verifyJSON
	decodeJSON(t, r.stdout, &out)
	if len(out.Steps) != 2 || out.Steps[0].Step != 20 || len(out.Steps[0].Problems) != 1 ||
		out.Steps[0].Problems[0].Kind != verify.Missing || !out.Steps[1].OK() || out.Requests["ListObjectsV2"] == 0 {
		t.Errorf("verify --json: %+v", out)
	}
	ferry(t, srv, "verify", "--from", url, "--step", "15").must(t, exitNoCheckpoint)
	for _, args := range [][]string{
		{"--all", "--last", "2"},
		{"--read-data", "--read-data-subset", "10%"},
		{"--read-data-subset", "10"},
		{"--read-data-subset", "0%"},
		{"--last", "0"},
	} {
		r := ferry(t, srv, append([]string{"verify", "--from", url}, args...)...).must(t, exitUsage)
		if strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Errorf("verify %v: want a one-line error, got %q", args, r.stderr)
		}
	}
}
