package soak_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferrylabs/ferry/internal/remote"
	"github.com/ferrylabs/ferry/internal/s3test"
	"github.com/ferrylabs/ferry/internal/soak"
)

func TestMain(m *testing.M) { s3test.Main(m) }

// TestSoakShort is make soak in a run CI affords: 600 steps (about 70 s),
// sampled every 100, judged against the same targets from step 300, then
// checked from the outside: every step the trainer kept was committed,
// prune kept the bucket short, and the newest step restores byte-equal.
func TestSoakShort(t *testing.T) {
	srv := s3test.Shared(t)
	bucket := srv.NewBucket(t)
	cfg := soak.Defaults()
	cfg.Steps, cfg.Every = 600, 100
	cfg.Ferry, cfg.Env, cfg.To, cfg.Dir = ferryBinary(t), srv.Env(), "s3://"+bucket+"/run", t.TempDir()
	res, err := soak.Run(context.Background(), cfg)
	if res != nil {
		var table bytes.Buffer
		soak.WriteTable(&table, res.Samples)
		t.Logf("%d prunes\n%s", res.Prunes, table.String())
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range soak.Check(res.Samples, soak.DefaultTargets(cfg.Steps, cfg.Every)) {
		t.Error(f)
	}
	end := res.Samples[len(res.Samples)-1]
	// Every 10th step is deleted by the trainer 100 ms after its save;
	// the agent may or may not have committed it by then.
	if kept := int64(cfg.Steps - cfg.Deleted()); end.Committed < kept || end.Last != int64(cfg.Steps) {
		t.Errorf("agent committed %d steps, newest %d; want at least the %d the trainer kept, newest %d", end.Committed, end.Last, kept, cfg.Steps)
	}
	if res.Prunes < cfg.Steps/cfg.PruneEvery {
		t.Errorf("%d prunes ran, want %d", res.Prunes, cfg.Steps/cfg.PruneEvery)
	}
	steps, err := remote.Steps(context.Background(), srv.Store(t, bucket), "run", 0)
	if err != nil {
		t.Fatal(err)
	}
	if most := cfg.PruneKeep + cfg.PruneEvery; len(steps) > most || len(steps) == 0 {
		t.Errorf("bucket holds %d steps after prune --keep-last %d every %d steps", len(steps), cfg.PruneKeep, cfg.PruneEvery)
	}
	sameAsRestored(t, cfg, srv)
}

// sameAsRestored restores the newest step and compares it byte for byte
// with the trainer's files, which --keep-local leaves on disk.
func sameAsRestored(t *testing.T, cfg soak.Config, srv *s3test.Server) {
	t.Helper()
	out := t.TempDir()
	cmd := exec.Command(cfg.Ferry, "restore", "--from", cfg.To, "--to", out)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}, srv.Env()...)
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ferry restore: %v\n%s", err, msg)
	}
	want := filepath.Join(cfg.Dir, "watch", "step-600")
	names, err := os.ReadDir(want)
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != 3 {
		t.Fatalf("step-600 holds %d files on disk, want 2 .distcp and .metadata", len(names))
	}
	for _, n := range names {
		a, err := os.ReadFile(filepath.Join(want, n.Name()))
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(out, "step-600", n.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a, b) {
			t.Errorf("restored step-600/%s differs from the trainer's", n.Name())
		}
	}
}

// ferryBinary is $FERRY_BIN, or ferry built from this checkout.
func ferryBinary(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv("FERRY_BIN"); bin != "" {
		return bin
	}
	bin := filepath.Join(t.TempDir(), "ferry")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/ferrylabs/ferry/cmd/ferry")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build ferry: %v\n%s", err, strings.TrimSpace(string(out)))
	}
	return bin
}
