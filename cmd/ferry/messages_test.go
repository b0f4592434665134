package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/internal/s3test"
)

// The messages a new user meets: each is one line saying what failed, the
// value that was wrong and what to do, with the exit code.
func TestCLIMessages(t *testing.T) {
	srv := s3test.Shared(t)
	bucket := srv.NewBucket(t)
	url := "s3://" + bucket + "/run"
	src := t.TempDir()
	writeFile(t, filepath.Join(src, "model.pt"), randomBytes(1000, 7))
	// Flags after the directory are accepted.
	ferry(t, srv, "push", src, "--to", url, "--step", "100", "-q").must(t, 0)
	ferry(t, srv, "push", "--to", url, src, "--step", "200").must(t, 0)
	dst := t.TempDir()
	env := filepath.Join(t.TempDir(), "agent.env")
	writeFile(t, env, []byte("FERRY_SETTLE=\"5\"\n"))
	cases := []struct {
		args []string
		env  []string
		code int
		line string
	}{
		{[]string{"push", "--to", url, "--step", "-3", src}, nil, 2,
			"ferry: --step -3: a step is a number from 0 up (see ferry push --help)"},
		{[]string{"push", "--stpe", "1", src}, nil, 2,
			"ferry: unknown flag --stpe: did you mean --step? (see ferry push --help)"},
		{[]string{"restore", "--form", url}, nil, 2,
			"ferry: unknown flag --form: did you mean --from? (see ferry restore --help)"},
		{[]string{"restore", "--from", url, "--to", dst, "--step", "1500"}, nil, 3,
			"ferry: step 1500: no committed checkpoint found at " + url + "; committed steps, newest first: 200, 100"},
		{[]string{"restore", "--from", url + "-nothing", "--to", dst}, nil, 3,
			"ferry: no committed checkpoint found at " + url + "-nothing: nothing is committed there; check --from (restore --allow-empty starts fresh)"},
		{[]string{"agent", "--config", env, "--watch", src}, nil, 2,
			"ferry: --config " + env + ": FERRY_SETTLE=\"5\": want a duration with a unit, e.g. 30s, 5m or 1h (see ferry agent --help)"},
		{[]string{"agent", "--watch", src, "--settle", "5"}, nil, 2,
			"ferry: --settle \"5\": want a duration with a unit, e.g. 30s, 5m or 1h (see ferry agent --help)"},
		{[]string{"push", "--to", url, "--step", "3", src}, []string{"FERRY_CONCURRENCY=many"}, 2,
			"ferry: FERRY_CONCURRENCY=\"many\" (--concurrency): want a whole number (see ferry push --help)"},
		{[]string{"frobnicate"}, nil, 2, "ferry: unknown command \"frobnicate\" (see ferry --help)"},
	}
	for _, c := range cases {
		r := ferryEnv(t, append(srv.Env(), c.env...), c.args...)
		if r.code != c.code || strings.TrimRight(r.stderr, "\n") != c.line {
			t.Errorf("ferry %s: exit %d, stderr %q\nwant exit %d, %q", strings.Join(c.args, " "), r.code, r.stderr, c.code, c.line)
		}
		if len(c.line) > 200 {
			t.Errorf("ferry %s: %d characters; keep messages short", strings.Join(c.args, " "), len(c.line))
		}
	}
}

// SIGINT during a push says how to resume, and --json still prints a result
// object carrying the error; running the same command again commits.
func TestCLIPushInterrupted(t *testing.T) {
	srv := s3test.Shared(t)
	url := "s3://" + srv.NewBucket(t) + "/run"
	src, state := t.TempDir(), t.TempDir()
	writeFile(t, filepath.Join(src, "model.pt"), randomBytes(24*mib, 8))
	args := []string{"push", "--json", "--to", url, "--step", "1", "--part-size", "5MiB", "--state-dir", state, src}
	// One part at a time at 8 MiB/s (0.6 s a part): the signal goes when
	// the server holds a part, with four still to send.
	cmd := ferryCmd(t, srv, append(args, "--bandwidth", "8MiB/s", "--concurrency", "1")...)
	var out, errb syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitForPart(t, srv, url)
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	_ = waitExit(t, cmd, time.Minute)
	if code := cmd.ProcessState.ExitCode(); code != 1 {
		t.Fatalf("exit %d after SIGINT, want 1; stderr %q", code, errb.String())
	}
	want := "run the same command again to resume; parts already sent are kept"
	if line := ferryErrorLine(t, errb.String()); line != "ferry: interrupted: "+want {
		t.Errorf("error line %q", line)
	}
	var sum pushSummary
	decodeJSON(t, out.String(), &sum)
	if sum.Step != 1 || sum.Committed || !strings.Contains(sum.Error, want) {
		t.Errorf("--json after SIGINT: %+v", sum)
	}
	r := ferry(t, srv, args...).must(t, 0)
	sum = pushSummary{}
	decodeJSON(t, r.stdout, &sum)
	if !sum.Committed || sum.Error != "" || sum.PartsReused == 0 {
		t.Errorf("re-run: %+v, want committed, resuming parts sent before", sum)
	}
}

// waitForPart returns once an upload under the s3:// url holds at least one
// part on the server: a fixed sleep raced the setup requests (R2's rules
// answer repeated writes to one key with 429 and a backoff).
func waitForPart(t *testing.T, srv *s3test.Server, url string) {
	t.Helper()
	bucket, prefix, _ := strings.Cut(strings.TrimPrefix(url, "s3://"), "/")
	st := srv.Store(t, bucket)
	ctx := context.Background()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		ups, err := st.ListUploads(ctx, prefix+"/")
		if err != nil {
			t.Fatalf("listing uploads: %v", err)
		}
		for _, u := range ups {
			parts, err := st.ListParts(ctx, u.Key, u.UploadID)
			if err != nil {
				t.Fatalf("listing parts of %s: %v", u.Key, err)
			}
			if len(parts) > 0 {
				return
			}
		}
	}
	t.Fatal("no part reached the server within a minute")
}

// An unreachable endpoint: the retries show at warn level after a few
// seconds (issue 48: an operator filtering on warnings must see them), and
// the error is one short line with the fix.
func TestCLIUnreachableEndpoint(t *testing.T) {
	src := t.TempDir()
	writeFile(t, filepath.Join(src, "model.pt"), randomBytes(1000, 9))
	r := ferryEnv(t, []string{"AWS_ACCESS_KEY_ID=a", "AWS_SECRET_ACCESS_KEY=b", "AWS_REGION=us-east-1"},
		"push", "--to", "s3://bkt/run", "--step", "1", "--endpoint", "http://127.0.0.1:1", src).must(t, 1)
	retrying := false
	for line := range strings.SplitSeq(r.stderr, "\n") {
		if strings.Contains(line, "still retrying S3 requests") {
			retrying = true
			if !strings.Contains(line, "\tWARN\t") {
				t.Errorf("retry line not at warn level: %s", line)
			}
		}
	}
	if !retrying {
		t.Errorf("no visible retry line before the error:\n%s", r.stderr)
	}
	want := "ferry: push step 1: cannot connect to http://127.0.0.1:1 (connection refused): check --endpoint or S3_ENDPOINT_URL, and that the server is up"
	if line := ferryErrorLine(t, r.stderr); line != want {
		t.Errorf("error line %q\nwant %q", line, want)
	}
}
