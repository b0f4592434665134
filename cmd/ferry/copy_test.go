package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferrylabs/ferry/internal/remote"
	"github.com/ferrylabs/ferry/internal/s3test"
	"github.com/ferrylabs/ferry/internal/store"
)

// ferry copy between two versitygw servers with different credentials:
// the destination's come from FERRY_TO_AWS_*; each step is copied once,
// deduplicated against the one before, restores byte for byte from the
// destination; a second run sends nothing; a corrupt source object fails
// its step with exit 1 and commits nothing; bad flags are one-line usage
// errors.
func TestCLICopy(t *testing.T) {
	srv := s3test.Shared(t)
	dst := s3test.Start(t, s3test.WithCredentials("ferrycopydest", "ferrycopydestsecret")).AsR2(t)
	from := "s3://" + srv.NewBucket(t) + "/run"
	toBucket := dst.NewBucket(t)
	to := "s3://" + toBucket + "/moved"
	toCreds := []string{"FERRY_TO_AWS_ACCESS_KEY_ID=" + dst.AccessKey, "FERRY_TO_AWS_SECRET_ACCESS_KEY=" + dst.SecretKey}
	copyCmd := func(env []string, args ...string) result {
		cmd := ferryCmd(t, srv, append([]string{"copy", "--from", from, "--to", to, "--to-endpoint", dst.Endpoint}, args...)...)
		cmd.Env = append(cmd.Env, env...)
		return run(t, cmd)
	}

	copyCmd(toCreds).must(t, exitNoCheckpoint)
	src := t.TempDir()
	writeFile(t, filepath.Join(src, "rank0.pt"), randomBytes(20<<20, 1))
	writeFile(t, filepath.Join(src, "config.json"), randomBytes(300, 2))
	ferry(t, srv, "push", "--to", from, "--step", "10", src).must(t, 0)
	writeFile(t, filepath.Join(src, "config.json"), randomBytes(300, 3))
	ferry(t, srv, "push", "--to", from, "--step", "20", src).must(t, 0)

	r := copyCmd(nil, "--all").must(t, exitFailure)
	if strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 || !strings.Contains(r.stderr, "ferry: copy to "+to) || !strings.Contains(r.stderr, "FERRY_TO_AWS_ACCESS_KEY_ID") {
		t.Errorf("copy without the destination's credentials: want one line, got %q", r.stderr)
	}
	r = copyCmd(toCreds, "--all").must(t, 0)
	if !strings.Contains(r.stdout, "step 10: copied 2 files") || !strings.Contains(r.stdout, "step 20: copied 2 files") ||
		!strings.Contains(r.stdout, "1 deduplicated") {
		t.Errorf("copy output:\n%s", r.stdout)
	}
	out := t.TempDir()
	restoreCmd := ferryCmd(t, dst, "restore", "--from", to, "--step", "20", "--to", out)
	run(t, restoreCmd).must(t, 0)
	for _, name := range []string{"rank0.pt", "config.json"} {
		want, _ := os.ReadFile(filepath.Join(src, name))
		got, err := os.ReadFile(filepath.Join(out, name))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s restored from the destination differs from what was pushed (%v)", name, err)
		}
	}

	r = copyCmd(toCreds, "--last", "2", "--json").must(t, 0)
	var res copyJSON
	decodeJSON(t, r.stdout, &res)
	if len(res.Steps) != 2 || !res.Steps[0].AlreadyCommitted || !res.Steps[1].AlreadyCommitted ||
		res.ToRequests["PutObject"] != 0 || res.ToRequests["UploadPart"] != 0 {
		t.Errorf("second copy --json: %+v", res)
	}

	// Step 30's new object is damaged at the source after its push.
	writeFile(t, filepath.Join(src, "config.json"), randomBytes(300, 4))
	ferry(t, srv, "push", "--to", from, "--step", "30", src).must(t, 0)
	st := srv.Store(t, strings.TrimPrefix(strings.TrimSuffix(from, "/run"), "s3://"))
	m, err := remote.Get(t.Context(), st, "run", 30)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range m.Files {
		if f.Path == "config.json" {
			bad := randomBytes(300, 5)
			if _, err := st.Put(t.Context(), f.Key, bytes.NewReader(bad), 300, store.PutOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	r = copyCmd(toCreds).must(t, exitFailure)
	if !strings.Contains(r.stdout, "step 30: failed: copy step 30: source object does not match its manifest") ||
		!strings.Contains(r.stderr, "step 30 not copied") {
		t.Errorf("copy of a damaged step:\nstdout: %s\nstderr: %s", r.stdout, r.stderr)
	}
	if _, err := remote.Get(t.Context(), dst.Store(t, toBucket), "moved", 30); err == nil {
		t.Error("the damaged step was committed at the destination")
	}

	for _, args := range [][]string{
		{"--all", "--step", "10"},
		{"--last", "0"},
		{"--concurrency", "0"},
		{"--to", ""},
		{"--to", from, "--to-endpoint", ""},
		{"extra-argument"},
	} {
		r := copyCmd(toCreds, args...).must(t, exitUsage)
		if strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Errorf("copy %v: want a one-line error, got %q", args, r.stderr)
		}
	}
}
