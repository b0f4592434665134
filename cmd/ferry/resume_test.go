package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/internal/s3test"
	"github.com/ferrylabs/ferry/internal/trainsim"
)

// A first run's restore --allow-empty leaves --to in place, as any restore
// does, so that the agent started next has a folder to watch.
func TestRestoreAllowEmptyCreatesTo(t *testing.T) {
	srv := s3test.Shared(t)
	url := "s3://" + srv.NewBucket(t) + "/run"
	dst := filepath.Join(t.TempDir(), "nvme", "ckpt")
	r := ferry(t, srv, "restore", "--from", url, "--to", dst, "--allow-empty").must(t, 0)
	fi, err := os.Stat(dst)
	if err != nil || !fi.IsDir() {
		t.Fatalf("after restore --allow-empty on an empty bucket, --to %s: %v (stdout %q)", dst, err, r.stdout)
	}
	entries, _ := os.ReadDir(dst)
	if len(entries) != 0 {
		t.Errorf("--to holds %d entries, want none", len(entries))
	}
	// A dry run changes nothing on disk.
	dry := filepath.Join(t.TempDir(), "dry")
	ferry(t, srv, "restore", "--from", url, "--to", dry, "--allow-empty", "--dry-run").must(t, 0)
	if _, err := os.Stat(dry); !os.IsNotExist(err) {
		t.Errorf("restore --dry-run --allow-empty created %s (%v)", dry, err)
	}
}

// An agent whose watch dir does not exist yet waits for it, says so, and
// uploads what the trainer writes once it is created; stopped while it
// waits, it exits 0. A file where the folder should be is a usage error.
func TestAgentWaitsForWatchDir(t *testing.T) {
	srv := s3test.Shared(t)
	bucket := srv.NewBucket(t)
	st := srv.Store(t, bucket)
	watch := filepath.Join(t.TempDir(), "nvme", "ckpt")
	args := []string{"--watch", watch, "--to", "s3://" + bucket + "/run", "--state-dir", t.TempDir(), "--layout", "composer",
		"--settle", "300ms", "--expected-ranks", "2", "--metrics-addr", "off"}
	agent := startAgentProcess(t, srv.Env(), args...)
	waitFor(t, "the agent to say it waits", 30*time.Second, func() bool {
		return strings.Contains(agent.logs.String(), "waiting for the watch dir to be created")
	})
	time.Sleep(2 * watchDirPoll)
	if !running(agent.Process.Pid) {
		t.Fatalf("the agent exited while its watch dir was missing:\n%s", agent.logs.String())
	}
	if err := os.MkdirAll(watch, 0o755); err != nil {
		t.Fatal(err)
	}
	sim := trainsim.Options{Dir: watch, Ranks: 2, FileSize: 1 << 20, Seed: 9}
	if err := trainsim.WriteStep(context.Background(), sim, 100); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "step 100 committed", 60*time.Second, func() bool { return len(committed(t, st, "run")) == 1 })
	if !strings.Contains(agent.logs.String(), "the watch dir exists now") {
		t.Errorf("the agent did not say it started watching:\n%s", agent.logs.String())
	}
	if err := agent.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := waitExit(t, agent.Cmd, time.Minute); err != nil {
		t.Fatalf("agent after SIGTERM: %v", err)
	}

	// Stopped while waiting: exit 0 at once.
	waiting := startAgentProcess(t, srv.Env(), append(args[:0:0], "--watch", filepath.Join(t.TempDir(), "never"),
		"--to", "s3://"+bucket+"/other", "--state-dir", t.TempDir(), "--metrics-addr", "off")...)
	waitFor(t, "the second agent to say it waits", 30*time.Second, func() bool {
		return strings.Contains(waiting.logs.String(), "waiting for the watch dir")
	})
	if err := waiting.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := waitExit(t, waiting.Cmd, 10*time.Second); err != nil {
		t.Fatalf("waiting agent after SIGTERM: %v\n%s", err, waiting.logs.String())
	}

	// A file is not a folder: exit 2, naming it.
	file := filepath.Join(t.TempDir(), "file")
	writeFile(t, file, []byte("x"))
	r := ferryEnv(t, srv.Env(), "agent", "--watch", file, "--to", "s3://"+bucket+"/run", "--metrics-addr", "off")
	if r.code != exitUsage || !strings.Contains(r.stderr, "--watch "+file+": not a directory") {
		t.Errorf("agent --watch FILE: exit %d, stderr %q; want %d naming it", r.code, r.stderr, exitUsage)
	}
}

// running reports whether process pid (a child not yet waited for) still
// runs: an exited child stays a zombie ("Z") until it is waited for.
func running(pid int) bool {
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	_, rest, _ := strings.Cut(string(stat), ") ")
	return !strings.HasPrefix(rest, "Z") && !strings.HasPrefix(rest, "X")
}

// README's "Resume anywhere" recipe, as written, on an empty bucket and a
// missing folder (a first run), then on a second new node with the same
// bucket: the first trains from scratch and its checkpoint is committed,
// the second resumes from it.
func TestReadmeResumeRecipe(t *testing.T) {
	srv := s3test.Shared(t)
	var recipe string
	section := false
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, part := range strings.Split(string(data), "\n## ") {
		if strings.HasPrefix(part, "Resume anywhere\n") {
			section = true
			_, rest, ok := strings.Cut(part, "\n```sh\n")
			recipe, _, _ = strings.Cut(rest, "\n```")
			if !ok {
				t.Fatal("README's Resume anywhere has no ```sh block")
			}
		}
	}
	if !section || recipe == "" {
		t.Fatal("README has no Resume anywhere section with a recipe")
	}
	bin := docsBin(t)
	bucket := srv.NewBucket(t)
	st := srv.Store(t, bucket)
	script := strings.ReplaceAll(recipe, "my-bucket", bucket)
	for i, want := range []string{"train: resuming from step none", "train: resuming from step 100"} {
		// runDocScript gives each run a new /nvme: a new node.
		out, err := runDocScript(t, srv, bin, srv.Env(), script)
		if err != nil {
			t.Fatalf("run %d of the recipe: %v\n%s", i+1, err, out)
		}
		if !strings.Contains(out, want) {
			t.Errorf("run %d: the trainer did not say %q:\n%s", i+1, want, out)
		}
		if got := committed(t, st, "run"); len(got) != i+1 {
			t.Errorf("run %d: committed steps %v, want %d", i+1, got, i+1)
		}
	}
}
