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
