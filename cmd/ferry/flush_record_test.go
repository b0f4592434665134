package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferrylabs/ferry/internal/s3test"
)

// TestFlushNamesStepAgainstRecord is issue 46 item 7: a DCP step whose
// .metadata is there and fresh but whose shard is shorter than the record
// says waits for ever; `ferry flush` exits 1 naming the step, the file,
// both sizes and what to do, instead of "all steps committed".
func TestFlushNamesStepAgainstRecord(t *testing.T) {
	srv := s3test.Shared(t)
	url := "s3://" + srv.NewBucket(t) + "/run"
	watch := t.TempDir()
	dir := copyDCPFiles(t, "world2", watch, ".metadata", "__0_0.distcp", "__1_0.distcp")
	shard := filepath.Join(dir, "__1_0.distcp")
	fi, _ := os.Stat(shard)
	if err := os.Truncate(shard, 2988); err != nil {
		t.Fatal(err)
	}
	_ = os.Chtimes(shard, fi.ModTime(), fi.ModTime())
	env := withEnv(agentEnv(srv, srv.Endpoint), "XDG_STATE_HOME="+t.TempDir())
	startAgentProcess(t, env, "--watch", watch, "--to", url, "--layout", "dcp", "--settle", "300ms", "--metrics-addr", "off")
	waitAgentUp(t, env, watch, url)
	r := jobFerry(t, env, watch, url, "flush", "--timeout", "20s")
	if r.code != 1 {
		t.Fatalf("flush exit %d, want 1:\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	out := r.stdout + r.stderr
	for _, want := range []string{"step 100 waits", "step-100/__1_0.distcp is 2988 bytes, step-100/.metadata records 5976", "disagree with what its framework recorded"} {
		if !strings.Contains(out, want) {
			t.Errorf("flush output lacks %q:\n%s", want, out)
		}
	}
}
