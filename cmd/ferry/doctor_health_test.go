package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/internal/remote"
	"github.com/ferrylabs/ferry/internal/s3test"
	"github.com/ferrylabs/ferry/manifest"
)

// ferry doctor --from RUN on a real S3 server adds the run's health to the
// setup checks, each one line with a fix:
//   - a healthy run of steps 100 and 300: all four ok, "step 300, the
//     latest", exit 0;
//   - a node part of step 400 (1 of 2 nodes) never committed and a
//     multipart upload never finished, older than --stale-after: both warn,
//     naming them; a damage record of step 300: newest restorable warns
//     "step 100, not the latest" with why, damage records warns naming 300;
//   - an object of step 100 deleted too: newest restorable fails, exit 1.
//
// Old code has no --from on doctor (exit 2).
func TestDoctorRunHealth(t *testing.T) {
	srv := s3test.Shared(t)
	bucket := srv.NewBucket(t)
	url := "s3://" + bucket + "/run"
	for i, step := range []string{"100", "300"} {
		src := t.TempDir()
		writeFile(t, filepath.Join(src, "model.pt"), randomBytes(30<<10, byte(40+i)))
		ferry(t, srv, "push", "--to", url, "--step", step, src).must(t, 0)
	}
	watch, state := deepSpeedTree(t), t.TempDir()
	args := []string{"doctor", "--watch", watch, "--to", "s3://" + bucket + "/setup", "--state-dir", state, "--settle", "1ms", "--from", url, "--json"}
	var d doctorResult
	decodeJSON(t, ferry(t, srv, args...).must(t, 0).stdout, &d)
	for _, c := range []string{"newest restorable", "uncommitted parts", "multipart uploads", "damage records"} {
		if d.status(c) != "ok" {
			t.Errorf("healthy run: %s is %s: %+v", c, d.status(c), d.Checks)
		}
	}
	if !strings.Contains(detail(d, "newest restorable"), "step 300, the latest") {
		t.Errorf("newest restorable: %q", detail(d, "newest restorable"))
	}

	st := srv.Store(t, bucket)
	putObject(t, st, manifest.PartKey("run", manifest.PartSet{Step: 400, Nodes: 2}, 0), []byte("{}"))
	id, err := st.CreateMultipart(t.Context(), manifest.DataPrefix("run")+"000000000400/a/model.pt")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.AbortMultipart(t.Context(), manifest.DataPrefix("run")+"000000000400/a/model.pt", id) })
	if _, err := remote.RecordDamage(t.Context(), st, "run", remote.Damage{Step: 300, Reason: "wrong hash of model.pt", At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	text := append(args[:len(args)-1:len(args)-1], "--stale-after", "10ms")
	r := ferry(t, srv, text...).must(t, 0)
	for _, want := range []string{
		"warn newest restorable: step 100, not the latest: step 300 skipped (recorded damaged: wrong hash of model.pt); fix: restores with --on-damaged previous land on step 100",
		"warn uncommitted parts: 1 step never committed, older than 10ms: step 400 of 2 nodes: parts of node ranks [0] only, newest ",
		"warn multipart uploads: 1 started over 10ms ago and never finished",
		"warn damage records: 1 step recorded damaged: step 300 (wrong hash of model.pt); fix: ",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("no line %q in:\n%s", want, r.stdout)
		}
	}
	for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		if !doctorLine.MatchString(l) {
			t.Errorf("line %q is not `status check: detail`", l)
		}
	}

	m, err := remote.Get(t.Context(), st, "run", 100)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Delete(t.Context(), m.Files[0].Key); err != nil {
		t.Fatal(err)
	}
	r = ferry(t, srv, text...).must(t, exitFailure)
	if !strings.Contains(r.stdout, "fail newest restorable: no committed step of 2 is restorable: step 300 skipped (recorded damaged") ||
		!strings.Contains(r.stdout, "step 100 skipped (step 100: model.pt: missing") {
		t.Errorf("nothing restorable:\n%s", r.stdout)
	}
}

// detail is the detail of doctor's check.
func detail(d doctorResult, check string) string {
	for _, c := range d.Checks {
		if c.Check == check {
			return c.Detail
		}
	}
	return ""
}
