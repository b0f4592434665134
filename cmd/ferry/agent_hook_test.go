package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/internal/remote"
	"github.com/ferrylabs/ferry/internal/s3test"
	"github.com/ferrylabs/ferry/internal/trainsim"
)

// TestAgentOnCommitHook: --on-commit runs after each commit with the
// step, the run, its files, bytes and revision in its environment, and a
// slow hook (15 s) does not hold up the next step's commit: step 200
// commits while step 100's hook still runs, and its own hook runs after.
func TestAgentOnCommitHook(t *testing.T) {
	srv := s3test.Shared(t)
	bucket := srv.NewBucket(t)
	st := srv.Store(t, bucket)
	url := "s3://" + bucket + "/run"
	watch, state, seen := t.TempDir(), t.TempDir(), t.TempDir()
	hook := `env | grep ^FERRY_ | sort > ` + seen + `/$FERRY_STEP.tmp && mv ` + seen + `/$FERRY_STEP.tmp ` + seen + `/$FERRY_STEP.env; sleep 15`
	startAgentProcess(t, srv.Env(), "--watch", watch, "--to", url, "--state-dir", state, "--layout", "composer",
		"--settle", "300ms", "--expected-ranks", "2", "--metrics-addr", "off", "--on-commit", hook)
	sim := trainsim.Options{Dir: watch, Ranks: 2, FileSize: 1 << 20, Seed: 7}
	hookSeen := func(n int64) bool {
		_, err := os.Stat(filepath.Join(seen, strconv.FormatInt(n, 10)+".env"))
		return err == nil
	}

	if err := trainsim.WriteStep(context.Background(), sim, 100); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "step 100's hook", 60*time.Second, func() bool { return hookSeen(100) })
	if err := trainsim.WriteStep(context.Background(), sim, 200); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "step 200 committed", 10*time.Second, func() bool { return len(committed(t, st, "run")) == 2 })
	if hookSeen(200) {
		t.Fatal("step 200's hook ran while step 100's was still sleeping: hooks must run one at a time")
	}

	m, err := remote.Get(context.Background(), st, "run", 100)
	if err != nil {
		t.Fatal(err)
	}
	var bytes int64
	for _, f := range m.Files {
		bytes += f.Size
	}
	data, _ := os.ReadFile(filepath.Join(seen, "100.env"))
	want := []string{"FERRY_BYTES=" + strconv.FormatInt(bytes, 10), "FERRY_DESTINATION=" + url,
		"FERRY_FILES=" + strconv.Itoa(len(m.Files)), "FERRY_REVISION=0", "FERRY_STEP=100"}
	for _, kv := range want {
		if !strings.Contains("\n"+string(data), "\n"+kv+"\n") {
			t.Errorf("hook environment lacks %s:\n%s", kv, data)
		}
	}
	waitFor(t, "step 200's hook, after step 100's", 40*time.Second, func() bool { return hookSeen(200) })
}
