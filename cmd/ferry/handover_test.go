package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/agent/control"
	"github.com/ferrylabs/ferry/internal/s3test"
)

// TestAgentOnRestoredFolder is the README's "Resume anywhere" recipe on a
// new node (issue 46 item 4): restore the latest step, then start the
// agent on the folder. The restored step is complete to the agent (no
// "saved again after its marker" alarm), is not uploaded again, and
// `ferry status` names it as the last committed step.
func TestAgentOnRestoredFolder(t *testing.T) {
	srv := s3test.Shared(t)
	url := "s3://" + srv.NewBucket(t) + "/run"
	src := t.TempDir()
	copyDCPFiles(t, "world2", src, ".metadata", "__0_0.distcp", "__1_0.distcp")
	ferry(t, srv, "push", "--to", url, "--step", "100", src).must(t, 0)

	dst := filepath.Join(t.TempDir(), "ckpt")
	ferry(t, srv, "restore", "--from", url, "--to", dst).must(t, 0)
	state := t.TempDir()
	env := agentEnv(srv, srv.Endpoint)
	ag := startAgentProcess(t, env, "--watch", dst, "--to", url, "--state-dir", state, "--layout", "dcp",
		"--settle", "300ms", "--metrics-addr", "off")
	waitFor(t, "the agent's status names step 100 committed", 20*time.Second, func() bool {
		r := ferry(t, nil, "status", "--state-dir", state, "--json")
		var s control.Status
		return r.code == 0 && decodeJSONErr(r.stdout, &s) == nil && s.LastCommitted == 100
	})
	time.Sleep(time.Second) // a settle window and more for any alarm to be raised
	logs := ag.logs.String()
	for _, bad := range []string{"saved again after its marker", "torn", "uploading step"} {
		if strings.Contains(logs, bad) {
			t.Fatalf("agent on a restored folder logged %q:\n%s", bad, logs)
		}
	}
}
