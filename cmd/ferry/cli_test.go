package main

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/ferrylabs/ferry/internal/s3test"
	"github.com/ferrylabs/ferry/manifest"
	"github.com/ferrylabs/ferry/uploader"
)

const mib = 1 << 20

func TestCLIRoundTrip(t *testing.T) {
	srv := s3test.Shared(t)
	bucket := srv.NewBucket(t)
	src := filepath.Join(t.TempDir(), "ckpt")
	sizes := map[string]int{
		"empty.bin": 0, "one.bin": 1, "part-1.bin": 5*mib - 1, "part.bin": 5 * mib,
		"part+1.bin": 5*mib + 1, "rank0/several.bin": 17*mib + 3,
	}
	var seed byte
	for name, n := range sizes {
		seed++
		writeFile(t, filepath.Join(src, name), randomBytes(n, seed))
	}
	if err := os.Symlink("part.bin", filepath.Join(src, "latest.bin")); err != nil {
		t.Fatal(err)
	}
	url := "s3://" + bucket + "/runs/a"
	r := ferry(t, srv, "push", "--to", url, "--step", "1000", "--part-size", "5MiB", "--json", "--state-dir", t.TempDir(), src).must(t, 0)
	var ps pushSummary
	decodeJSON(t, r.stdout, &ps)
	if !ps.Committed || ps.Files != len(sizes) {
		t.Fatalf("push summary %+v", ps)
	}
	// The summary counts requests: 3 single PUTs (one pack of the two
	// files under 4 MiB, two files up to the part size) plus the manifest,
	// and 2 multipart files of 2 and 4 parts.
	req := ps.Requests
	if req["PutObject"] != 4 || req["CreateMultipartUpload"] != 2 || req["UploadPart"] != 6 || req["CompleteMultipartUpload"] != 2 {
		t.Errorf("push requests %v", req)
	}

	r = ferry(t, srv, "list", "--from", url, "--json").must(t, 0)
	var rows []stepSummary
	decodeJSON(t, r.stdout, &rows)
	if len(rows) != 1 || rows[0].Step != 1000 || rows[0].Files != len(sizes) {
		t.Fatalf("list = %+v", rows)
	}

	r = ferry(t, srv, "show", "--from", url).must(t, 0)
	m, err := manifest.DecodeBytes([]byte(r.stdout), "runs/a")
	if err != nil {
		t.Fatalf("show printed an invalid manifest: %v", err)
	}
	if len(m.Symlinks) != 1 || m.Symlinks[0].Target != "part.bin" {
		t.Errorf("symlinks = %+v", m.Symlinks)
	}

	// The objects are plain S3 objects: the SDK's own GetObject reads them,
	// a packed file at its offset in its pack.
	client := srv.Client(t)
	for _, f := range m.Files {
		out, err := client.GetObject(context.Background(), &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(f.Key)})
		if err != nil {
			t.Fatalf("plain GetObject %s: %v", f.Key, err)
		}
		data, _ := io.ReadAll(out.Body)
		out.Body.Close()
		want, _ := os.ReadFile(filepath.Join(src, f.Path))
		if int64(len(data)) != f.ObjectSize() || f.Packed() != (len(want) < uploader.PackFileLimit) {
			t.Errorf("%s: object of %d bytes, packed %v; want %d bytes, packed when under %d", f.Path, len(data), f.Packed(), f.ObjectSize(), uploader.PackFileLimit)
			continue
		}
		if string(data[f.Offset:f.Offset+f.Size]) != string(want) {
			t.Errorf("plain GetObject of %s differs from the file", f.Path)
		}
	}

	dst := filepath.Join(t.TempDir(), "restored")
	r = ferry(t, srv, "restore", "--from", url, "--to", dst, "--json").must(t, 0)
	var rs restoreSummary
	decodeJSON(t, r.stdout, &rs)
	if rs.Requests["ListObjectsV2"] != 3 || rs.Requests["HeadObject"] != 0 || rs.Requests["GetObject"] < 6 {
		t.Errorf("restore requests %v: want three listings (manifests, damage records, one key of data after the latest step), no HEAD, GETs for the manifest and data", rs.Requests)
	}
	sameTree(t, src, dst)
	if target, err := os.Readlink(filepath.Join(dst, "latest.bin")); err != nil || target != "part.bin" {
		t.Errorf("restored symlink latest.bin -> %q, %v", target, err)
	}
}

func TestCLIRePush(t *testing.T) {
	srv := s3test.Shared(t)
	url := "s3://" + srv.NewBucket(t) + "/run"
	src := t.TempDir()
	writeFile(t, filepath.Join(src, "w.pt"), randomBytes(6*mib, 1))
	ferry(t, srv, "push", "--to", url, "--step", "5", "--part-size", "5MiB", src).must(t, 0)

	r := ferry(t, srv, "push", "--to", url, "--step", "5", "--part-size", "5MiB", "--json", src).must(t, 0)
	var ps pushSummary
	decodeJSON(t, r.stdout, &ps)
	if ps.Committed || ps.BytesSent != 0 {
		t.Fatalf("identical re-push uploaded: %+v", ps)
	}
	before := ferry(t, srv, "show", "--from", url, "--step", "5").must(t, 0).stdout

	writeFile(t, filepath.Join(src, "w.pt"), randomBytes(6*mib, 2))
	r = ferry(t, srv, "push", "--to", url, "--step", "5", src).must(t, 1)
	if !strings.Contains(r.stderr, "already committed with different content") || strings.Count(strings.TrimSpace(r.stderr), "\n") > 1 {
		t.Errorf("conflict message: %q", r.stderr)
	}
	if after := ferry(t, srv, "show", "--from", url, "--step", "5").must(t, 0).stdout; after != before {
		t.Error("a conflicting push changed the committed manifest")
	}
}

func TestCLIEmptyAndExitCodes(t *testing.T) {
	srv := s3test.Shared(t)
	url := "s3://" + srv.NewBucket(t) + "/nothing"
	dst := filepath.Join(t.TempDir(), "d")
	r := ferry(t, srv, "restore", "--from", url, "--to", dst).must(t, 3)
	if !strings.Contains(r.stderr, "no committed checkpoint found") {
		t.Errorf("stderr %q", r.stderr)
	}
	ferry(t, srv, "show", "--from", url).must(t, 3)
	r = ferry(t, srv, "restore", "--from", url, "--to", dst, "--allow-empty").must(t, 0)
	if !strings.Contains(r.stdout, "starting fresh") {
		t.Errorf("stdout %q", r.stdout)
	}
	// Bad usage: exit 2 with one line naming what is wrong.
	for _, args := range [][]string{
		{"push", "--to", url, t.TempDir()},
		{"push", "--step", "1", t.TempDir()},
		{"push", "--to", "http://x/y", "--step", "1", t.TempDir()},
		{"push", "--to", url, "--step", "1", "--part-size", "1MiB", t.TempDir()},
		{"restore", "--from", url},
		{"list", "--from", url, "--bogus"},
		{"frobnicate"},
	} {
		r := ferry(t, srv, args...)
		if r.code != 2 {
			t.Errorf("ferry %v: exit %d, want 2 (stderr %q)", args, r.code, r.stderr)
		}
	}
}

func TestCLIRestoreRejectsCorruptObject(t *testing.T) {
	srv := s3test.Shared(t)
	bucket := srv.NewBucket(t)
	url := "s3://" + bucket + "/run"
	src := t.TempDir()
	writeFile(t, filepath.Join(src, "model.pt"), randomBytes(3*mib, 1))
	writeFile(t, filepath.Join(src, "optim.pt"), randomBytes(2*mib, 2))
	ferry(t, srv, "push", "--to", url, "--step", "9", src).must(t, 0)
	m, err := manifest.DecodeBytes([]byte(ferry(t, srv, "show", "--from", url).must(t, 0).stdout), "run")
	if err != nil {
		t.Fatal(err)
	}
	var key string
	for _, f := range m.Files {
		if f.Path == "model.pt" {
			key = f.Key
		}
	}
	// Same size, different bytes: only the hash can tell.
	bad := randomBytes(3*mib, 1)
	bad[mib] ^= 0xff
	if _, err := srv.Client(t).PutObject(context.Background(), &s3.PutObjectInput{
		Bucket: aws.String(bucket), Key: aws.String(key), Body: strings.NewReader(string(bad)),
	}); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "out")
	r := ferry(t, srv, "restore", "--from", url, "--to", dst).must(t, 1)
	if !containsAll(r.stderr, "model.pt", "BLAKE3") {
		t.Errorf("error does not name the file and the hash: %q", r.stderr)
	}
	if _, err := os.Stat(filepath.Join(dst, "model.pt")); !os.IsNotExist(err) {
		t.Errorf("a corrupt file was placed at its final path (stat: %v)", err)
	}
}

func TestCLIRestoreRejectsEscapingManifest(t *testing.T) {
	srv := s3test.Shared(t)
	bucket := srv.NewBucket(t)
	url := "s3://" + bucket + "/run"
	evil := `{"format":"1.0","step":3,"created":"2026-01-01T00:00:00Z","files":[{"path":"../escaped.txt","size":1,` +
		`"blake3":"` + strings.Repeat("a", 64) + `","key":"run/data/000000000003/x/escaped.txt","part_size":0}]}`
	if _, err := srv.Client(t).PutObject(context.Background(), &s3.PutObjectInput{
		Bucket: aws.String(bucket), Key: aws.String(manifest.ManifestKey("run", 3)), Body: strings.NewReader(evil),
	}); err != nil {
		t.Fatal(err)
	}
	parent := t.TempDir()
	dst := filepath.Join(parent, "out")
	r := ferry(t, srv, "restore", "--from", url, "--to", dst).must(t, 1)
	if !containsAll(r.stderr, "files[0].path", "..") {
		t.Errorf("error does not name the field: %q", r.stderr)
	}
	if _, err := os.Stat(filepath.Join(parent, "escaped.txt")); !os.IsNotExist(err) {
		t.Error("a file was written outside the target directory")
	}
}

func TestCLIPushResumesAfterSIGKILL(t *testing.T) {
	srv := s3test.Shared(t)
	bucket := srv.NewBucket(t)
	url := "s3://" + bucket + "/run"
	src := t.TempDir()
	const size = 40 * mib
	writeFile(t, filepath.Join(src, "rank0.pt"), randomBytes(size, 7))
	state := t.TempDir()
	args := []string{"push", "--to", url, "--step", "42", "--part-size", "5MiB", "--concurrency", "2", "--state-dir", state, "--json"}

	// Capped at 8 MiB/s, the 40 MiB push takes about 5 s: kill it once
	// the server holds at least two whole parts. The upload to look at is
	// the one the push recorded in its state file.
	cmd := ferryCmd(t, srv, append(args, "--bandwidth", "8MiB/s", src)...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	client := srv.Client(t)
	waitFor(t, "two whole parts on the server", 60*time.Second, func() bool {
		key, id := recordedUpload(t, state)
		if id == "" {
			return false
		}
		parts, err := client.ListParts(context.Background(), &s3.ListPartsInput{Bucket: aws.String(bucket), Key: aws.String(key), UploadId: aws.String(id)})
		if err != nil {
			return false
		}
		whole := 0
		for _, p := range parts.Parts {
			if aws.ToInt64(p.Size) == 5*mib {
				whole++
			}
		}
		return whole >= 2
	})
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if r := ferry(t, srv, "show", "--from", url); r.code != 3 {
		t.Fatalf("a killed push left a committed step (show exit %d)", r.code)
	}

	r := ferry(t, srv, append(args, src)...).must(t, 0)
	var ps pushSummary
	decodeJSON(t, r.stdout, &ps)
	if !ps.Committed || ps.PartsReused < 2 || ps.BytesSent >= size {
		t.Fatalf("resumed push: %+v, want committed, >=2 parts resumed and fewer than %d bytes sent", ps, size)
	}
	dst := filepath.Join(t.TempDir(), "out")
	ferry(t, srv, "restore", "--from", url, "--to", dst).must(t, 0)
	sameTree(t, src, dst)
	if key, id := recordedUpload(t, state); id != "" {
		t.Errorf("state still records upload %s of %s after the commit", id, key)
	}
}

// recordedUpload returns the multipart upload a push's state file records.
func recordedUpload(t *testing.T, stateDir string) (key, uploadID string) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(stateDir, "push-*.json"))
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var st struct {
			Uploads map[string]struct {
				UploadID string `json:"upload_id"`
			} `json:"uploads"`
		}
		if json.Unmarshal(raw, &st) != nil {
			continue
		}
		for k, u := range st.Uploads {
			return k, u.UploadID
		}
	}
	return "", ""
}

func TestCLIWithCABundle(t *testing.T) {
	srv := s3test.Start(t, s3test.WithTLS())
	if srv.CAFile == "" {
		t.Fatal("TLS server has no CA file")
	}
	url := "s3://" + srv.NewBucket(t) + "/tls"
	src := t.TempDir()
	writeFile(t, filepath.Join(src, "a.pt"), randomBytes(6*mib, 3))
	// srv.Env() sets AWS_CA_BUNDLE: the SDK then insists on an
	// *http.Transport, which ferry's client must keep.
	ferry(t, srv, "push", "--to", url, "--step", "1", "--part-size", "5MiB", src).must(t, 0)
	dst := filepath.Join(t.TempDir(), "out")
	ferry(t, srv, "restore", "--from", url, "--to", dst).must(t, 0)
	sameTree(t, src, dst)
}

// Without --fsync a crash may lose restored data that was not yet written
// back. What must hold is that the next restore (the job's entrypoint runs
// one at every start) re-verifies every file it finds at a final path and
// replaces a wrong one: a file corrupted in place (same size, same mtime)
// or truncated between two restores is detected and fetched again.
func TestCLIRestoreReverifiesFinalPaths(t *testing.T) {
	srv := s3test.Shared(t)
	url := "s3://" + srv.NewBucket(t) + "/run"
	src := t.TempDir()
	files := map[string][]byte{"model.pt": randomBytes(6*mib+11, 41), "optim.pt": randomBytes(300<<10, 42), "rng.pt": randomBytes(4096, 43)}
	for name, data := range files {
		writeFile(t, filepath.Join(src, name), data)
	}
	ferry(t, srv, "push", "--to", url, "--step", "9", "--part-size", "5MiB", src).must(t, 0)
	dst := t.TempDir()
	ferry(t, srv, "restore", "--from", url, "--to", dst).must(t, 0)
	sameTree(t, src, dst)

	// model.pt: one byte flipped in place, size and mtime kept.
	p := filepath.Join(dst, "model.pt")
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{files["model.pt"][5*mib] ^ 0xff}, 5*mib); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := os.Chtimes(p, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	// optim.pt: truncated, as a crash before writeback can leave it.
	if err := os.Truncate(filepath.Join(dst, "optim.pt"), 100<<10); err != nil {
		t.Fatal(err)
	}
	var sum restoreSummary
	decodeJSON(t, ferry(t, srv, "restore", "--from", url, "--to", dst, "--json").must(t, 0).stdout, &sum)
	if sum.Kept != 1 || sum.Downloaded != 2 {
		t.Errorf("second restore kept %d and downloaded %d files, want 1 and 2 (the damaged ones)", sum.Kept, sum.Downloaded)
	}
	sameTree(t, src, dst)
	// With --fsync the same holds, and the files are durable on return.
	if err := os.Truncate(filepath.Join(dst, "rng.pt"), 0); err != nil {
		t.Fatal(err)
	}
	decodeJSON(t, ferry(t, srv, "restore", "--from", url, "--to", dst, "--json", "--fsync").must(t, 0).stdout, &sum)
	if sum.Kept != 2 || sum.Downloaded != 1 {
		t.Errorf("--fsync restore kept %d and downloaded %d files, want 2 and 1", sum.Kept, sum.Downloaded)
	}
	sameTree(t, src, dst)
}
