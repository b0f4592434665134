package main

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferrylabs/ferry/internal/remote"
	"github.com/ferrylabs/ferry/internal/s3proxy"
	"github.com/ferrylabs/ferry/internal/s3test"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/manifest"
)

// damagedRun pushes steps 500 and 600 of a DCP-like folder to a fresh
// bucket and flips a byte of step 600's __2_0.distcp object. It returns
// the bucket, the run's URL, the shard's object key and its good bytes.
func damagedRun(t *testing.T, srv *s3test.Server) (bucket, url, key string, good []byte) {
	t.Helper()
	bucket = srv.NewBucket(t)
	url = "s3://" + bucket + "/run"
	for _, step := range []string{"500", "600"} {
		src := filepath.Join(t.TempDir(), "step-"+step)
		seed := byte(len(step) + int(step[0]))
		writeFile(t, filepath.Join(src, "step-"+step, ".metadata"), randomBytes(2000, seed))
		for i, name := range []string{"__0_0.distcp", "__1_0.distcp", "__2_0.distcp"} {
			writeFile(t, filepath.Join(src, "step-"+step, name), randomBytes(300<<10, seed+byte(i)+1))
		}
		ferry(t, srv, "push", "--to", url, "--step", step, src).must(t, 0)
	}
	st := srv.Store(t, bucket)
	m, err := remote.Get(t.Context(), st, "run", 600)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range m.Files {
		if f.Path == "step-600/__2_0.distcp" {
			key = f.Key
		}
	}
	good = readObject(t, st, key)
	bad := bytes.Clone(good)
	bad[1000] ^= 1
	putObject(t, st, key, bad)
	return bucket, url, key, good
}

func readObject(t *testing.T, st store.Store, key string) []byte {
	t.Helper()
	b, err := remote.ReadObject(t.Context(), st, key)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func putObject(t *testing.T, st store.Store, key string, data []byte) {
	t.Helper()
	if _, err := st.Put(context.Background(), key, bytes.NewReader(data), int64(len(data)), store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
}

// listFiles returns the regular files under dir, relative.
func listFiles(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, rel)
		}
		return nil
	})
	return out
}

// A damaged latest step (a flipped byte in one shard) on a real S3 server:
//   - plain restore exits 1 naming the file, and places nothing;
//   - --on-damaged previous restores step 500, exit 0, says in --json and
//     at warn that step 600 was skipped and why; with credentials that
//     cannot write the record it says so, and writes none;
//   - with write access the first restore records the damage beside the
//     manifests, and a later restore skips step 600 without reading it
//     (its object is made good again, and the record still rules);
//   - ferry verify --clear-damaged 600 removes the record, and the latest
//     restore is step 600 again.
func TestCLIRestoreOnDamaged(t *testing.T) {
	srv := s3test.Shared(t)
	bucket, url, key, good := damagedRun(t, srv)
	st := srv.Store(t, bucket)
	recordKey := manifest.DamagedKey("run", 600)

	// A node whose credentials cannot write (every PUT refused).
	ro, _ := srv.WithProxy(t, s3proxy.Config{Rules: []s3proxy.Rule{{Ops: []string{s3proxy.OpPutObject}, Action: s3proxy.Status(403, "AccessDenied")}}})
	dir := t.TempDir()
	r := ferry(t, ro, "restore", "--from", url, "--to", dir).must(t, exitFailure)
	if !strings.Contains(r.stderr, "step-600/__2_0.distcp") || !strings.Contains(r.stderr, "BLAKE3 mismatch") {
		t.Errorf("stderr does not name the damaged file:\n%s", r.stderr)
	}
	if got := listFiles(t, dir); len(got) != 0 {
		t.Errorf("a failed restore left %v", got)
	}
	r = ferry(t, ro, "restore", "--from", url, "--to", dir, "--on-damaged", "previous", "--json").must(t, 0)
	var sum restoreSummary
	decodeJSON(t, r.stdout, &sum)
	if sum.Step != 500 || len(sum.Skipped) != 1 || sum.Skipped[0].Step != 600 || sum.Skipped[0].Path != "step-600/__2_0.distcp" ||
		!strings.Contains(sum.Skipped[0].Reason, "BLAKE3 mismatch") || !strings.HasPrefix(sum.Skipped[0].Record, "not recorded: ") {
		t.Errorf("restore --json: %+v", sum)
	}
	if !strings.Contains(r.stderr, "WARN") || !strings.Contains(r.stderr, "could not record the damaged step") {
		t.Errorf("no warning that the record could not be written:\n%s", r.stderr)
	}
	if _, err := st.Head(t.Context(), recordKey); err == nil {
		t.Error("a read-only restore wrote a damage record")
	}
	if got := listFiles(t, dir); strings.Join(got, " ") != "step-500/.metadata step-500/__0_0.distcp step-500/__1_0.distcp step-500/__2_0.distcp" {
		t.Errorf("target holds %v, want step 500 only", got)
	}

	// A node that can write records the damage; the next one skips the
	// step without reading it, even once its bytes are good again.
	r = ferry(t, srv, "restore", "--from", url, "--to", t.TempDir(), "--on-damaged", "previous", "--json").must(t, 0)
	sum = restoreSummary{}
	decodeJSON(t, r.stdout, &sum)
	if sum.Step != 500 || len(sum.Skipped) != 1 || sum.Skipped[0].Record != "recorded" {
		t.Errorf("restore --json: %+v", sum)
	}
	var rec remote.Damage
	decodeJSON(t, string(readObject(t, st, recordKey)), &rec)
	if rec.Step != 600 || rec.Path != "step-600/__2_0.distcp" || rec.Key != key || !strings.Contains(rec.Reason, "BLAKE3 mismatch") {
		t.Errorf("damage record %+v", rec)
	}
	putObject(t, st, key, good)
	r = ferry(t, srv, "restore", "--from", url, "--to", t.TempDir(), "--on-damaged", "previous", "--json").must(t, 0)
	sum = restoreSummary{}
	decodeJSON(t, r.stdout, &sum)
	if sum.Step != 500 || len(sum.Skipped) != 1 || sum.Skipped[0].Record != "recorded before" {
		t.Errorf("restore after the record: %+v", sum)
	}
	r = ferry(t, srv, "restore", "--from", url, "--to", t.TempDir()).must(t, exitFailure)
	if !strings.Contains(r.stderr, "recorded damaged") {
		t.Errorf("plain restore of a recorded step: %s", r.stderr)
	}
	r = ferry(t, srv, "verify", "--from", url, "--clear-damaged", "600").must(t, 0)
	if !strings.Contains(r.stdout, "step 600: damage record cleared") {
		t.Errorf("verify --clear-damaged: %s", r.stdout)
	}
	if _, err := st.Head(t.Context(), recordKey); err == nil {
		t.Error("the damage record is still there")
	}
	r = ferry(t, srv, "restore", "--from", url, "--to", t.TempDir(), "--on-damaged", "previous", "--json").must(t, 0)
	sum = restoreSummary{}
	decodeJSON(t, r.stdout, &sum)
	if sum.Step != 600 || len(sum.Skipped) != 0 {
		t.Errorf("restore after the record was cleared: %+v", sum)
	}
	ferry(t, srv, "restore", "--from", url, "--to", t.TempDir(), "--on-damaged", "previous", "--step", "600").must(t, exitUsage)
	ferry(t, srv, "restore", "--from", url, "--to", t.TempDir(), "--on-damaged", "maybe").must(t, exitUsage)
	os.Remove(dir)
}

// ferry verify says what it checked: without --read-data it reads no byte,
// passes the flipped byte and says so; --read-data finds it, and with
// --mark-damaged records the step, so that a restore --on-damaged previous
// skips it without reading it.
func TestCLIVerifySaysWhatItCheckedAndMarks(t *testing.T) {
	srv := s3test.Shared(t)
	bucket, url, _, _ := damagedRun(t, srv)
	r := ferry(t, srv, "verify", "--from", url).must(t, 0)
	if !strings.Contains(r.stdout, "checked: manifests, and every object present with its size; no bytes were read") {
		t.Errorf("verify does not say it checked sizes only:\n%s", r.stdout)
	}
	r = ferry(t, srv, "verify", "--from", url, "--json").must(t, 0)
	var out verifyJSON
	decodeJSON(t, r.stdout, &out)
	if out.Checked != "sizes" {
		t.Errorf("verify --json checked %q, want sizes", out.Checked)
	}
	r = ferry(t, srv, "verify", "--from", url, "--all", "--read-data", "--mark-damaged", "--json").must(t, exitFailure)
	decodeJSON(t, r.stdout, &out)
	if out.Checked != "bytes" || len(out.Marked) != 1 || out.Marked[0].Step != 600 || out.Marked[0].Record != "recorded damaged" {
		t.Errorf("verify --read-data --mark-damaged --json: checked %q, marked %+v", out.Checked, out.Marked)
	}
	var rec remote.Damage
	decodeJSON(t, string(readObject(t, srv.Store(t, bucket), manifest.DamagedKey("run", 600))), &rec)
	if rec.Path != "step-600/__2_0.distcp" || !strings.Contains(rec.Reason, "wrong hash") {
		t.Errorf("damage record %+v", rec)
	}
	r = ferry(t, srv, "restore", "--from", url, "--to", t.TempDir(), "--on-damaged", "previous", "--json").must(t, 0)
	var sum restoreSummary
	decodeJSON(t, r.stdout, &sum)
	if sum.Step != 500 || len(sum.Skipped) != 1 || sum.Skipped[0].Record != "recorded before" {
		t.Errorf("restore after verify --mark-damaged: %+v", sum)
	}
	ferry(t, srv, "verify", "--from", url, "--clear-damaged", "-3").must(t, exitUsage)
}
