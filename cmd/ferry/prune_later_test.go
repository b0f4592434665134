package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/internal/prune"
	"github.com/ferrylabs/ferry/internal/s3test"
	"github.com/ferrylabs/ferry/manifest"
)

// ferry prune --keep-last 1 --keep-every 1000 on a real S3 server with
// the default --min-age 24h prunes step 1500's manifest and frees 0 bytes:
// its objects wait behind its tombstone. The dry run and the real run say
// so ("later: 1 objects (40 KiB) of pruned steps ... from <in 24h>"),
// --json carries it, and a stray object nothing references is named as
// such. A run with --min-age 1s a second later deletes the object the
// first run said it would, and says nothing is left for later.
func TestCLIPruneSaysWhatIsDeletableLater(t *testing.T) {
	srv := s3test.Shared(t)
	bucket := srv.NewBucket(t)
	url := "s3://" + bucket + "/run"
	for i, step := range []string{"1000", "1500", "2000"} {
		src := t.TempDir()
		writeFile(t, filepath.Join(src, "model.pt"), randomBytes(40<<10, byte(i+1)))
		ferry(t, srv, "push", "--to", url, "--step", step, src).must(t, 0)
	}
	st := srv.Store(t, bucket)
	putObject(t, st, manifest.DataPrefix("run")+"000000009999/stray/x.pt", randomBytes(1000, 9))
	args := []string{"prune", "--from", url, "--keep-last", "1", "--keep-every", "1000"}

	for _, dry := range []bool{true, false} {
		a := args
		if dry {
			a = append(a, "--dry-run")
		}
		r := ferry(t, srv, a...).must(t, 0)
		if !containsAll(r.stdout, "pruned steps [1500]", " 0 objects (0 B)",
			"later: 1 objects (40.0 KiB) of pruned steps, kept until their tombstones are --min-age (24h0m0s) old; a prune run from ",
			"(in 24h0m0s) deletes them",
			"later: 1 objects (1000 B) that nothing references yet, younger than --min-age") {
			t.Errorf("prune (dry run %v) does not say what becomes deletable:\n%s", dry, r.stdout)
		}
	}
	var sum pruneSummary
	decodeJSON(t, ferry(t, srv, append(args, "--dry-run", "--json")...).must(t, 0).stdout, &sum)
	// The manifest is gone now; its tombstone (written a moment ago) keeps
	// the objects.
	if len(sum.Later) != 2 || sum.Later[0].Why != prune.LaterPruned || sum.Later[0].Bytes != 40<<10 ||
		time.Until(sum.Later[0].From) < 23*time.Hour || sum.Later[1].Why != prune.LaterUnreferenced {
		t.Errorf("--json later: %+v", sum.Later)
	}

	time.Sleep(1100 * time.Millisecond)
	r := ferry(t, srv, append(args, "--min-age", "1s")...).must(t, 0)
	if !containsAll(r.stdout, "deleted 2 objects (41.0 KiB)", "1 expired tombstones") || strings.Contains(r.stdout, "later:") {
		t.Errorf("prune after --min-age:\n%s", r.stdout)
	}
}
