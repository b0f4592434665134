package main

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestDeclaredAgainUploadedOnce is issue 47's flood of declarations:
// `ferry commit --no-wait` of one step, twenty times while its upload runs
// (paced by --bandwidth), restarted the upload at each one and sent every
// byte again; it now goes on, each byte is stored once, and a flush after
// the commit answers at once though the layout's own settle window (1 h)
// still holds the step.
func TestDeclaredAgainUploadedOnce(t *testing.T) {
	root := t.TempDir()
	watch, bucket := filepath.Join(root, "watch"), filepath.Join(root, "bucket")
	for _, d := range []string{filepath.Join(watch, "step-7"), filepath.Join(bucket, "run")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(watch, "step-7", "model.bin"), randomBytes(3<<20, 7))
	to := "file://" + bucket + "/run"
	env := []string{"XDG_STATE_HOME=" + t.TempDir()}
	ag := startAgentProcess(t, env, "--watch", watch, "--to", to, "--layout", "flat", "--step-pattern", `^step-(\d+)$`,
		"--settle", "1h", "--bandwidth", "1MiB/s", "--metrics-addr", "off")
	waitAgentUp(t, env, watch, to)
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() { jobFerry(t, env, watch, to, "commit", "--no-wait", "--step", "7", "step-7").must(t, 0) })
		time.Sleep(50 * time.Millisecond)
	}
	wg.Wait()
	start := time.Now()
	jobFerry(t, env, watch, to, "flush", "--timeout", "30s").must(t, 0)
	t.Logf("flush took %v", time.Since(start))
	var stored int64
	_ = filepath.Walk(filepath.Join(bucket, "run", "data"), func(_ string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			stored += fi.Size()
		}
		return nil
	})
	if stored != 3<<20 {
		t.Fatalf("%d bytes stored for a 3 MiB step declared 20 times, want each byte once", stored)
	}
	if logs := ag.logs.String(); strings.Contains(logs, "abandoned unfinished upload") {
		t.Fatalf("the upload was restarted:\n%s", logs)
	}
}
