package main

import (
	"strings"
	"testing"

	"github.com/ferrylabs/ferry/internal/remote"
	"github.com/ferrylabs/ferry/internal/s3test"
	"github.com/ferrylabs/ferry/internal/verify"
)

// ferry verify --newest-restorable on a real S3 server, with a byte of
// step 600 flipped (same size):
//   - the cheap check (sizes) answers 600 and says no byte was read;
//   - --read-data answers 500, and --json names 600 as skipped for a wrong
//     hash of its shard;
//   - with --mark-damaged it records 600, and from then on the cheap check
//     skips 600 unread ("recorded damaged"), as restores do;
//   - once an object of 500 is deleted too, no step is restorable: exit 1;
//   - it refuses --step (exit 2).
func TestCLIVerifyNewestRestorable(t *testing.T) {
	srv := s3test.Shared(t)
	bucket, url, key, _ := damagedRun(t, srv)
	st := srv.Store(t, bucket)

	r := ferry(t, srv, "verify", "--from", url, "--newest-restorable").must(t, 0)
	if !containsAll(r.stdout, "newest restorable: step 600 (4 files", "no bytes were read") || strings.Contains(r.stdout, "skipped") {
		t.Errorf("cheap check:\n%s", r.stdout)
	}

	r = ferry(t, srv, "verify", "--from", url, "--newest-restorable", "--read-data", "--json").must(t, 0)
	var out newestJSON
	decodeJSON(t, r.stdout, &out)
	if out.Step == nil || *out.Step != 500 || out.Checked != "bytes" || len(out.Skipped) != 1 || out.Skipped[0].Step != 600 ||
		out.Skipped[0].Problems[0].Kind != verify.WrongHash || out.Skipped[0].Problems[0].Key != key || out.Skipped[0].Recorded {
		t.Errorf("--read-data --json:\n%s", r.stdout)
	}

	r = ferry(t, srv, "verify", "--from", url, "--newest-restorable", "--read-data", "--mark-damaged").must(t, 0)
	if !containsAll(r.stdout, "skipped step 600: step 600: step-600/__2_0.distcp: wrong hash", "step 600: recorded damaged", "newest restorable: step 500") {
		t.Errorf("--read-data --mark-damaged:\n%s", r.stdout)
	}
	damaged, err := remote.DamagedSteps(t.Context(), st, "run")
	if _, ok := damaged[600]; err != nil || !ok {
		t.Fatalf("no damage record of step 600: %v %v", damaged, err)
	}
	r = ferry(t, srv, "verify", "--from", url, "--newest-restorable").must(t, 0)
	if !containsAll(r.stdout, "skipped step 600: recorded damaged: ", "newest restorable: step 500") {
		t.Errorf("the cheap check does not honour the record:\n%s", r.stdout)
	}

	m, err := remote.Get(t.Context(), st, "run", 500)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Delete(t.Context(), m.Files[0].Key); err != nil {
		t.Fatal(err)
	}
	r = ferry(t, srv, "verify", "--from", url, "--newest-restorable").must(t, exitFailure)
	if !containsAll(r.stdout, "skipped step 600: recorded damaged", "skipped step 500: step 500: ", "missing", "newest restorable: none") ||
		!strings.Contains(r.stderr, "no committed step is restorable") {
		t.Errorf("nothing restorable:\nstdout %s\nstderr %s", r.stdout, r.stderr)
	}
	ferry(t, srv, "verify", "--from", url, "--newest-restorable", "--step", "500").must(t, exitUsage)
}
