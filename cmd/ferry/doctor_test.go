package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/ferrylabs/ferry/internal/s3test"
)

// doctorLine is the shape of every line ferry doctor prints.
var doctorLine = regexp.MustCompile(`^(ok  |warn|fail|skip) [A-Za-z ()]+: \S`)

// doctorResult is ferry doctor --json.
type doctorResult struct {
	OK     bool `json:"ok"`
	Checks []struct {
		Check, Status, Detail, Fix string
	} `json:"checks"`
}

func (d doctorResult) status(check string) string {
	for _, c := range d.Checks {
		if c.Check == check {
			return c.Status
		}
	}
	return "absent"
}

// deepSpeedTree writes a DeepSpeed checkpoint dir with step 100 complete
// (named by latest) and step 200 still waiting for it.
func deepSpeedTree(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "global_step100", "mp_rank_00_model_states.pt"), randomBytes(100, 1))
	writeFile(t, filepath.Join(dir, "latest"), []byte("global_step100"))
	writeFile(t, filepath.Join(dir, "global_step200", "mp_rank_00_model_states.pt"), randomBytes(100, 2))
	return dir
}

// TestDoctor: against versitygw with a usable setup every check passes,
// each on one line, and the bucket is left as it was.
func TestDoctor(t *testing.T) {
	srv := s3test.Shared(t)
	bucket := srv.NewBucket(t)
	watch, state := deepSpeedTree(t), t.TempDir()
	args := []string{"doctor", "--watch", watch, "--to", "s3://" + bucket + "/run", "--state-dir", state, "--settle", "1ms"}
	r := ferry(t, srv, args...).must(t, 0)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	for _, l := range lines {
		if !doctorLine.MatchString(l) {
			t.Errorf("line %q is not `status check: detail`", l)
		}
		if strings.HasPrefix(l, "fail") {
			t.Errorf("a check failed on a usable setup: %s", l)
		}
	}
	for _, want := range []string{"endpoint", "clock", "credentials", "bucket", "write (PUT)", "read (GET)", "list", "multipart",
		"delete", "conditional writes", "watch dir", "layout", "filesystem", "inotify", "leases", "free space", "state dir"} {
		if !strings.Contains(r.stdout, want+": ") {
			t.Errorf("no %q check in:\n%s", want, r.stdout)
		}
	}
	if !containsAll(r.stdout, "layout deepspeed", "1 complete step (newest 100", "step 200 waiting") {
		t.Errorf("the layout line does not say what the agent would see:\n%s", r.stdout)
	}
	if keys := bucketKeys(t, srv, bucket); len(keys) != 0 {
		t.Errorf("doctor left %q in the bucket", keys)
	}
	if ups, err := srv.Store(t, bucket).ListUploads(t.Context(), ""); err != nil || len(ups) != 0 {
		t.Errorf("doctor left multipart uploads %+v (%v)", ups, err)
	}
	// The agent started next reuses doctor's proof of conditional writes.
	if ents, err := os.ReadDir(storesDir(state)); err != nil || len(ents) != 1 {
		t.Errorf("stores cache after doctor: %v, %v; want one proof", ents, err)
	}

	// --quiet: the lines that warn, and no other.
	var problems []string
	for _, l := range lines {
		if !strings.HasPrefix(l, "ok") && !strings.HasPrefix(l, "skip") {
			problems = append(problems, l)
		}
	}
	if q := strings.TrimSpace(ferry(t, srv, append(args, "--quiet")...).must(t, 0).stdout); q != strings.Join(problems, "\n") {
		t.Errorf("doctor --quiet printed\n%s\nwant only the warnings of\n%s", q, r.stdout)
	}

	var d doctorResult
	decodeJSON(t, ferry(t, srv, append(args, "--json")...).must(t, 0).stdout, &d)
	if !d.OK || d.status("conditional writes") != "ok" || d.status("multipart") != "ok" || len(d.Checks) != len(lines) {
		t.Errorf("doctor --json: %+v", d)
	}
}

// TestDoctorFailures: each broken setting fails its check with a fix and
// exit 1; the checks that depend on it are skipped; nothing is left in the
// bucket.
func TestDoctorFailures(t *testing.T) {
	srv := s3test.Shared(t)
	bucket := srv.NewBucket(t)
	ignoring, _, ignoringBucket := ignoringStore(t)
	watch := deepSpeedTree(t)
	cases := []struct {
		name    string
		srv     *s3test.Server
		env     []string
		bucket  string
		watch   string
		failed  string
		skipped []string
	}{
		{"wrong credentials", srv, withEnv(srv.Env(), "AWS_SECRET_ACCESS_KEY=not-the-secret"), bucket, watch, "credentials", []string{"bucket", "multipart"}},
		{"missing bucket", srv, srv.Env(), "ferry-doctor-no-such-bucket", watch, "bucket", []string{"write (PUT)", "conditional writes"}},
		{"missing watch dir", srv, srv.Env(), bucket, filepath.Join(watch, "nope"), "watch dir", []string{"layout", "inotify"}},
		{"conditions ignored", ignoring, ignoring.Env(), ignoringBucket, watch, "conditional writes", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := ferryEnv(t, c.env, "doctor", "--json", "--watch", c.watch, "--to", "s3://"+c.bucket+"/run", "--state-dir", t.TempDir())
			if r.code != exitFailure || !strings.Contains(r.stderr, "checks failed") {
				t.Fatalf("exit %d, stderr %q; want 1 and the count of failed checks", r.code, r.stderr)
			}
			var d doctorResult
			if err := json.Unmarshal([]byte(r.stdout), &d); err != nil {
				t.Fatalf("doctor --json: %v\n%s", err, r.stdout)
			}
			failed := 0
			for _, ch := range d.Checks {
				if ch.Status == "fail" {
					failed++
					if ch.Fix == "" {
						t.Errorf("check %s failed without a fix: %+v", ch.Check, ch)
					}
				}
			}
			if d.OK || d.status(c.failed) != "fail" || failed != 1 {
				t.Errorf("want %q, and only it, failed: %+v", c.failed, d.Checks)
			}
			for _, s := range c.skipped {
				if d.status(s) != "skip" {
					t.Errorf("%s: %s, want skipped after %s failed", s, d.status(s), c.failed)
				}
			}
			q := ferryEnv(t, c.env, "doctor", "--quiet", "--watch", c.watch, "--to", "s3://"+c.bucket+"/run", "--state-dir", t.TempDir())
			if q.code != exitFailure || !regexp.MustCompile(`(?m)^fail `+regexp.QuoteMeta(c.failed)+`: .*; fix: `).MatchString(q.stdout) ||
				regexp.MustCompile(`(?m)^(ok|skip) `).MatchString(q.stdout) {
				t.Errorf("doctor --quiet: exit %d, stdout\n%s\nwant 1, the %s line with its fix, and no ok or skip lines", q.code, q.stdout, c.failed)
			}
			if c.bucket != "ferry-doctor-no-such-bucket" {
				if keys := bucketKeys(t, c.srv, c.bucket); len(keys) != 0 {
					t.Errorf("doctor left %q in the bucket", keys)
				}
			}
		})
	}
}

// TestDoctorFolder: a file:// destination has no endpoint, clock or
// credentials to check; the folder's own checks pass and leave it empty.
func TestDoctorFolder(t *testing.T) {
	dest := t.TempDir()
	r := ferry(t, nil, "doctor", "--json", "--watch", deepSpeedTree(t), "--to", "file://"+dest, "--state-dir", t.TempDir()).must(t, 0)
	var d doctorResult
	decodeJSON(t, r.stdout, &d)
	for check, want := range map[string]string{"endpoint": "skip", "credentials": "skip", "bucket": "ok", "multipart": "ok", "conditional writes": "ok", "delete": "ok"} {
		if got := d.status(check); got != want {
			t.Errorf("%s: %s, want %s", check, got, want)
		}
	}
	var left []string
	_ = filepath.WalkDir(dest, func(p string, e os.DirEntry, err error) error {
		if err == nil && e.IsDir() && e.Name() == ".ferry" {
			return filepath.SkipDir // the folder store's own locks
		}
		if err == nil && e.Type().IsRegular() {
			left = append(left, p)
		}
		return nil
	})
	if len(left) != 0 {
		t.Errorf("doctor left %q in the folder", left)
	}
}

// TestDoctorDestinationUnopened: a destination that cannot even be opened
// (a folder that does not exist) is one fail line saying why; the store's
// other checks are skipped and this host's still run.
func TestDoctorDestinationUnopened(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-such-folder")
	r := ferry(t, nil, "doctor", "--json", "--watch", deepSpeedTree(t), "--to", "file://"+missing, "--state-dir", t.TempDir()).must(t, 1)
	var d doctorResult
	decodeJSON(t, r.stdout, &d)
	for check, want := range map[string]string{"destination": "fail", "bucket": "skip", "conditional writes": "skip", "watch dir": "ok", "layout": "ok", "state dir": "ok"} {
		if got := d.status(check); got != want {
			t.Errorf("%s: %s, want %s\n%s", check, got, want, r.stdout)
		}
	}
	if !strings.Contains(r.stdout, missing+" does not exist: create it") {
		t.Errorf("the destination's line does not say what is wrong:\n%s", r.stdout)
	}
}
