package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferrylabs/ferry/internal/s3test"
)

// restore --include/--exclude: the selected files byte for byte and
// nothing else; a bad pattern is a one-line usage error (exit 2) before
// anything is fetched; an include matching nothing fails (exit 1) with
// nothing written, unless --allow-empty.
func TestCLIRestoreIncludeExclude(t *testing.T) {
	srv := s3test.Shared(t)
	url := "s3://" + srv.NewBucket(t) + "/run"
	src := t.TempDir()
	model := randomBytes(7<<20, 1)
	writeFile(t, filepath.Join(src, "global_step100", "mp_rank_00_model_states.pt"), model)
	writeFile(t, filepath.Join(src, "global_step100", "zero_pp_rank_0_mp_rank_00_optim_states.pt"), randomBytes(9<<20, 2))
	writeFile(t, filepath.Join(src, "latest"), []byte("global_step100"))
	ferry(t, srv, "push", "--to", url, "--step", "100", "--part-size", "5MiB", src).must(t, 0)

	dst := filepath.Join(t.TempDir(), "eval")
	ferry(t, srv, "restore", "--from", url, "--to", dst, "--include", "global_step100", "--exclude", "*optim_states*").must(t, 0)
	got, err := os.ReadFile(filepath.Join(dst, "global_step100", "mp_rank_00_model_states.pt"))
	if err != nil || string(got) != string(model) {
		t.Fatalf("model states: %d bytes, %v; want the pushed %d bytes", len(got), err, len(model))
	}
	for _, p := range []string{"latest", "global_step100/zero_pp_rank_0_mp_rank_00_optim_states.pt"} {
		if _, err := os.Lstat(filepath.Join(dst, p)); err == nil {
			t.Errorf("%s restored, but not selected", p)
		}
	}

	r := ferry(t, srv, "restore", "--from", url, "--to", t.TempDir(), "--include", "a/[b").must(t, exitUsage)
	if !strings.Contains(r.stderr, `--include "a/[b"`) || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
		t.Errorf("bad pattern: %q", r.stderr)
	}
	empty := filepath.Join(t.TempDir(), "none")
	r = ferry(t, srv, "restore", "--from", url, "--to", empty, "--include", "global_step200").must(t, exitFailure)
	if !strings.Contains(r.stderr, `--include "global_step200" matches none of the step's files`) {
		t.Errorf("include matching nothing: %q", r.stderr)
	}
	if ents, _ := os.ReadDir(empty); len(ents) != 0 {
		t.Errorf("files written by a restore that matched nothing: %v", ents)
	}
	ferry(t, srv, "restore", "--from", url, "--to", empty, "--include", "global_step200", "--allow-empty").must(t, 0)
}

// restore --dry-run reads the manifest and no data (its only GET is the
// manifest's), writes nothing, and its numbers are what the real restore
// then does: the files downloaded and the ranged GETs; after that restore
// a dry run finds every file in place.
func TestCLIRestoreDryRun(t *testing.T) {
	srv := s3test.Shared(t)
	url := "s3://" + srv.NewBucket(t) + "/run"
	src := t.TempDir()
	writeFile(t, filepath.Join(src, "rank0.pt"), randomBytes(70<<20+3, 1)) // 3 ranged GETs of 32 MiB
	writeFile(t, filepath.Join(src, "rank1.pt"), randomBytes(1000, 2))
	writeFile(t, filepath.Join(src, "empty"), nil) // no GET
	ferry(t, srv, "push", "--to", url, "--step", "7", src).must(t, 0)
	dst := filepath.Join(t.TempDir(), "ckpt")

	r := ferry(t, srv, "restore", "--from", url, "--to", dst, "--dry-run", "--json").must(t, 0)
	var dry restoreSummary
	decodeJSON(t, r.stdout, &dry)
	if dry.DryRun == nil || dry.DryRun.Download != 3 || dry.DryRun.Present != 0 || dry.DryRun.GETs != 4 || dry.Files != 3 {
		t.Fatalf("dry run: %+v %+v; want 3 files to download in 4 GETs", dry, dry.DryRun)
	}
	if dry.Requests["GetObject"] != 1 || dry.DryRun.CostUSD <= 0 {
		t.Errorf("dry run requests %v, cost %v; want the manifest's GET alone", dry.Requests, dry.DryRun.CostUSD)
	}
	if _, err := os.Stat(dst); err == nil {
		t.Errorf("dry run created %s", dst)
	}

	r = ferry(t, srv, "restore", "--from", url, "--to", dst, "--json").must(t, 0)
	var real restoreSummary
	decodeJSON(t, r.stdout, &real)
	// The GETs of the manifest, of the step's damage record (read again
	// before placing, restore/crosscheck.go), and of the data.
	if real.Downloaded != dry.DryRun.Download || real.Requests["GetObject"] != 2+dry.DryRun.GETs {
		t.Errorf("restore downloaded %d files with %d GETs; the dry run said %d files, 2 + %d GETs",
			real.Downloaded, real.Requests["GetObject"], dry.DryRun.Download, dry.DryRun.GETs)
	}
	sameTree(t, src, dst)

	r = ferry(t, srv, "restore", "--from", url, "--to", dst, "--dry-run").must(t, 0)
	if !strings.Contains(r.stdout, "download: 0 files") || !strings.Contains(r.stdout, "in place with the right size: 3 files") {
		t.Errorf("dry run after the restore:\n%s", r.stdout)
	}
}
