package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/internal/s3test"
)

// TestLinkIntoAnotherStep is issue 46 item 6: checkpoint-200/frozen.bin is
// a link to ../checkpoint-100/frozen.bin. The agent commits step 200 with
// the link and warns at detection that a restore of the step alone
// dangles; restore of step 200 on a new folder warns before placing it
// (text and --json), instead of "all hashes verified" alone.
func TestLinkIntoAnotherStep(t *testing.T) {
	srv := s3test.Shared(t)
	url := "s3://" + srv.NewBucket(t) + "/run"
	watch := t.TempDir()
	for _, s := range []string{"checkpoint-100", "checkpoint-200"} {
		writeFile(t, filepath.Join(watch, s, "model.safetensors"), []byte("weights of "+s))
	}
	writeFile(t, filepath.Join(watch, "checkpoint-100", "frozen.bin"), []byte("frozen embeddings"))
	if err := os.Symlink("../checkpoint-100/frozen.bin", filepath.Join(watch, "checkpoint-200", "frozen.bin")); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"checkpoint-100", "checkpoint-200"} {
		writeFile(t, filepath.Join(watch, s, "trainer_state.json"), []byte("{}"))
	}
	ag := startAgentProcess(t, agentEnv(srv, srv.Endpoint), "--watch", watch, "--to", url, "--state-dir", t.TempDir(),
		"--layout", "hf", "--settle", "300ms", "--metrics-addr", "off")
	st := srv.Store(t, strings.TrimPrefix(strings.TrimSuffix(url, "/run"), "s3://"))
	waitFor(t, "steps 100 and 200 committed", 30*time.Second, func() bool { return len(committed(t, st, "run")) == 2 })
	if !strings.Contains(ag.logs.String(), "points outside its folder") {
		t.Fatalf("no warning at detection:\n%s", ag.logs.String())
	}
	dst := t.TempDir()
	r := ferry(t, srv, "restore", "--from", url, "--step", "200", "--to", dst).must(t, 0)
	if !strings.Contains(r.stdout, "warning: link checkpoint-200/frozen.bin -> ../checkpoint-100/frozen.bin dangles") {
		t.Fatalf("restore of step 200 alone: no dangling warning:\n%s", r.stdout)
	}
	var sum restoreSummary
	decodeJSON(t, ferry(t, srv, "restore", "--from", url, "--step", "200", "--to", t.TempDir(), "--json").must(t, 0).stdout, &sum)
	if len(sum.Dangling) != 1 {
		t.Fatalf("--json dangling_links = %v", sum.Dangling)
	}
	// Restored beside step 100, the link does not dangle: no warning.
	both := t.TempDir()
	ferry(t, srv, "restore", "--from", url, "--step", "100", "--to", both).must(t, 0)
	if r := ferry(t, srv, "restore", "--from", url, "--step", "200", "--to", both).must(t, 0); strings.Contains(r.stdout, "dangles") {
		t.Fatalf("link whose target is on disk reported dangling:\n%s", r.stdout)
	}
}
