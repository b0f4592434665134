package main

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/internal/filestore"
	"github.com/ferrylabs/ferry/internal/remote"
	"github.com/ferrylabs/ferry/internal/s3test"
	"github.com/ferrylabs/ferry/internal/trainsim"
	"github.com/ferrylabs/ferry/manifest"
)

// openFolder opens the file store of folder for the test's own checks.
func openFolder(t *testing.T, folder string) *filestore.Store {
	t.Helper()
	st, err := filestore.Open(folder, filestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// TestCLIFileStore: every command that takes a location works on a
// file:// folder, with no S3 server: push (multipart and packed files),
// list, show, verify, restore byte for byte, copy to a second folder,
// prune; a corrupted object is caught; a missing folder is one line.
func TestCLIFileStore(t *testing.T) {
	folder := filepath.Join(t.TempDir(), "ckpt")
	if err := os.Mkdir(folder, 0o755); err != nil {
		t.Fatal(err)
	}
	url := "file://" + folder
	src := t.TempDir()
	writeFile(t, filepath.Join(src, "model.pt"), randomBytes(12*mib+5, 1))
	writeFile(t, filepath.Join(src, "optim", "rank0.pt"), randomBytes(3*mib, 2))
	writeFile(t, filepath.Join(src, "meta.json"), []byte(`{"step": 10}`))
	r := ferry(t, nil, "push", "--to", url, "--step", "10", "--part-size", "5MiB", "--json", src).must(t, 0)
	var sum pushSummary
	decodeJSON(t, r.stdout, &sum)
	if want := url + "/" + manifest.ManifestKey("", 10); sum.Manifest != want {
		t.Errorf("push --json manifest %q, want %q", sum.Manifest, want)
	}
	writeFile(t, filepath.Join(src, "meta.json"), []byte(`{"step": 20}`))
	ferry(t, nil, "push", "--to", url, "--step", "20", "--part-size", "5MiB", src).must(t, 0)

	if r := ferry(t, nil, "list", "--from", url).must(t, 0); !containsAll(r.stdout, "10", "20") {
		t.Errorf("list: %q", r.stdout)
	}
	ferry(t, nil, "show", "--from", url, "--step", "10").must(t, 0)
	ferry(t, nil, "verify", "--from", url, "--all", "--read-data").must(t, 0)
	dst := filepath.Join(t.TempDir(), "out")
	ferry(t, nil, "restore", "--from", url, "--to", dst).must(t, 0)
	sameTree(t, src, dst)

	copied := filepath.Join(t.TempDir(), "copy")
	if err := os.Mkdir(copied, 0o755); err != nil {
		t.Fatal(err)
	}
	ferry(t, nil, "copy", "--from", url, "--to", "file://"+copied, "--all").must(t, 0)
	ferry(t, nil, "verify", "--from", "file://"+copied, "--all", "--read-data").must(t, 0)

	ferry(t, nil, "prune", "--from", url, "--keep-last", "1", "--min-age", "0").must(t, 0)
	st := openFolder(t, folder)
	if got := committed(t, st, ""); !slices.Equal(got, []int64{20}) {
		t.Errorf("after prune --keep-last 1 committed = %v, want [20]", got)
	}
	if err := remote.CheckObjects(context.Background(), st, ""); err != nil {
		t.Errorf("after prune: %v", err)
	}
	corruptLargest(t, folder)
	ferry(t, nil, "verify", "--from", url, "--read-data").must(t, exitFailure)
	ferry(t, nil, "restore", "--from", url, "--to", filepath.Join(t.TempDir(), "bad")).must(t, exitFailure)

	r = ferry(t, nil, "list", "--from", "file://"+folder+"-not-mounted").must(t, exitFailure)
	if !strings.Contains(r.stderr, "mkdir -p "+folder+"-not-mounted") || strings.Count(strings.TrimSpace(r.stderr), "\n") > 0 {
		t.Errorf("list of a missing folder: %q, want one line saying to create it", r.stderr)
	}
}

// corruptLargest flips a byte in the middle of the largest object under
// folder, keeping its size.
func corruptLargest(t *testing.T, folder string) {
	t.Helper()
	var largest string
	var size int64
	err := filepath.Walk(filepath.Join(folder, "data"), func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() && fi.Size() > size {
			largest, size = p, fi.Size()
		}
		return err
	})
	if err != nil || largest == "" {
		t.Fatalf("no object under %s: %v", folder, err)
	}
	f, err := os.OpenFile(largest, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, size/2); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xff
	if _, err := f.WriteAt(b, size/2); err != nil {
		t.Fatal(err)
	}
}

// TestAgentFileStore: the agent commits a trainer's step to a file://
// folder, and a restore from it gives back the trainer's bytes.
func TestAgentFileStore(t *testing.T) {
	folder := t.TempDir()
	url := "file://" + folder
	watch := t.TempDir()
	agent := startAgentProcess(t, nil, "--watch", watch, "--to", url, "--state-dir", t.TempDir(),
		"--layout", "composer", "--settle", "300ms", "--expected-ranks", "2", "--part-size", "5MiB", "--metrics-addr", "off")
	sim := trainsim.Options{Dir: watch, Ranks: 2, FileSize: 11 << 20, Seed: 7}
	if err := trainsim.WriteStep(context.Background(), sim, 30); err != nil {
		t.Fatal(err)
	}
	st := openFolder(t, folder)
	waitFor(t, "step 30 committed to "+url, time.Minute, func() bool {
		return slices.Equal(committed(t, st, ""), []int64{30})
	})
	if err := agent.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := waitExit(t, agent.Cmd, time.Minute); err != nil {
		t.Fatalf("agent exit after SIGTERM: %v, want 0", err)
	}
	if err := remote.CheckObjects(context.Background(), st, ""); err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	ferry(t, nil, "restore", "--from", url, "--to", dst).must(t, 0)
	for r := range sim.Ranks {
		name := trainsim.FileName(sim.Epoch, 30, r)
		want, err := os.ReadFile(filepath.Join(watch, name))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(dst, name))
		if err != nil || string(got) != string(want) {
			t.Errorf("restored %s: %d bytes (%v), want the trainer's %d", name, len(got), err, len(want))
		}
	}
}

// TestCLIFolderToBucket: the tiering of docs/file-store.md, against the
// real S3 server: push to a folder, copy it to a bucket, restore from the
// bucket byte for byte.
func TestCLIFolderToBucket(t *testing.T) {
	srv := s3test.Shared(t)
	bucket := "s3://" + srv.NewBucket(t) + "/run"
	folder := "file://" + t.TempDir()
	src := t.TempDir()
	writeFile(t, filepath.Join(src, "model.pt"), randomBytes(11*mib, 3))
	writeFile(t, filepath.Join(src, "rng.pt"), randomBytes(1000, 4))
	ferry(t, nil, "push", "--to", folder, "--step", "5", "--part-size", "5MiB", src).must(t, 0)
	ferry(t, srv, "copy", "--from", folder, "--to", bucket).must(t, 0)
	ferry(t, srv, "verify", "--from", bucket, "--read-data").must(t, 0)
	dst := t.TempDir()
	ferry(t, srv, "restore", "--from", bucket, "--to", dst).must(t, 0)
	sameTree(t, src, dst)
}
