package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferrylabs/ferry/internal/s3test"
)

// TestRestoreNamesNewerLocalStep is issue 46 item 6: a node that still
// holds a torn checkpoint-300 of its own restores committed step 200
// beside it; HF's get_last_checkpoint would then resume from the torn one.
// restore says so (text and --json), and with --set-aside-newer renames it
// out of the way, bytes untouched.
func TestRestoreNamesNewerLocalStep(t *testing.T) {
	srv := s3test.Shared(t)
	url := "s3://" + srv.NewBucket(t) + "/run"
	src := t.TempDir()
	writeFile(t, filepath.Join(src, "checkpoint-200", "model.safetensors"), []byte("weights of 200"))
	ferry(t, srv, "push", "--to", url, "--step", "200", src).must(t, 0)

	dst := t.TempDir()
	torn := filepath.Join(dst, "checkpoint-300", "model.safetensors")
	writeFile(t, torn, []byte("half of 3"))
	r := ferry(t, srv, "restore", "--from", url, "--to", dst).must(t, 0)
	if !strings.Contains(r.stdout, "warning: checkpoint-300 (step 300) is newer than restored step 200") {
		t.Fatalf("no warning about checkpoint-300:\n%s", r.stdout)
	}
	var sum restoreSummary
	decodeJSON(t, ferry(t, srv, "restore", "--from", url, "--to", dst, "--json").must(t, 0).stdout, &sum)
	if len(sum.NewerLocal) != 1 || sum.NewerLocal[0].Name != "checkpoint-300" || sum.NewerLocal[0].Step != 300 {
		t.Fatalf("--json newer_local = %+v", sum.NewerLocal)
	}
	if data, err := os.ReadFile(torn); err != nil || string(data) != "half of 3" {
		t.Fatalf("without --set-aside-newer the folder must stay as it was: %q %v", data, err)
	}

	r = ferry(t, srv, "restore", "--from", url, "--to", dst, "--set-aside-newer").must(t, 0)
	if !strings.Contains(r.stdout, "set aside checkpoint-300 (step 300") {
		t.Fatalf("no set-aside line:\n%s", r.stdout)
	}
	if _, err := os.Stat(filepath.Join(dst, "checkpoint-300")); !os.IsNotExist(err) {
		t.Fatalf("checkpoint-300 still there: %v", err)
	}
	moved, _ := filepath.Glob(filepath.Join(dst, "checkpoint-300.ferry-set-aside-*", "model.safetensors"))
	if len(moved) != 1 {
		t.Fatalf("set-aside folder: %v", moved)
	}
	if data, err := os.ReadFile(moved[0]); err != nil || string(data) != "half of 3" {
		t.Fatalf("set-aside bytes: %q %v", data, err)
	}
	if data, err := os.ReadFile(filepath.Join(dst, "checkpoint-200", "model.safetensors")); err != nil || string(data) != "weights of 200" {
		t.Fatalf("restored step: %q %v", data, err)
	}
}
