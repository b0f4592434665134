package main

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/ferrylabs/ferry/internal/remote"
	"github.com/ferrylabs/ferry/internal/s3test"
)

// Nodes restoring together (--peers) with the entrypoint flags, when a
// byte of the latest step flipped: each finds the damage, falls back to
// the step before and restores it with its peers again, exit 0, every
// byte the pushed one. (A node joined its peers once per restore: the
// fallback's second join panicked, "close of closed channel".)
func TestCLIRestoreWithPeersOnDamaged(t *testing.T) {
	srv := s3test.Shared(t)
	bucket := srv.NewBucket(t)
	url := "s3://" + bucket + "/run"
	srcs := map[int64]string{}
	for _, step := range []int64{500, 600} {
		src := t.TempDir()
		for r := range 2 {
			writeFile(t, filepath.Join(src, fmt.Sprintf("rank%d.pt", r)), randomBytes(1<<20+r, byte(step/100+int64(r)*7)))
		}
		ferry(t, srv, "push", "--to", url, "--step", fmt.Sprint(step), "--pack=false", src).must(t, 0)
		srcs[step] = src
	}
	st := srv.Store(t, bucket)
	m, err := remote.Get(t.Context(), st, "run", 600)
	if err != nil {
		t.Fatal(err)
	}
	key := m.Files[1].Key
	bad := readObject(t, st, key)
	bad[100] ^= 1
	putObject(t, st, key, bad)

	addrs := freePorts(t, 2)
	outs := make([]result, 2)
	dirs := []string{t.TempDir(), t.TempDir()}
	var wg sync.WaitGroup
	for i := range 2 {
		cmd := ferryCmd(t, srv, "restore", "--from", url, "--to", dirs[i], "--json", "--on-damaged", "previous", "--set-aside-newer",
			"--peers", strings.Join(addrs, ","), "--peer-rank", fmt.Sprint(i), "--peer-listen", addrs[i], "--peer-wait", "5s")
		wg.Go(func() {
			var o, e bytes.Buffer
			cmd.Stdout, cmd.Stderr = &o, &e
			err := cmd.Run()
			outs[i] = result{stdout: o.String(), stderr: e.String()}
			if err != nil {
				outs[i].code = -1
				if ee, ok := err.(interface{ ExitCode() int }); ok {
					outs[i].code = ee.ExitCode()
				}
			}
		})
	}
	wg.Wait()
	for i, r := range outs {
		r.must(t, 0)
		var sum restoreSummary
		decodeJSON(t, r.stdout, &sum)
		if sum.Step != 500 || len(sum.Skipped) != 1 || sum.Skipped[0].Step != 600 {
			t.Errorf("node %d: step %d, skipped %+v; want 500, 600 skipped", i, sum.Step, sum.Skipped)
		}
		sameFiles(t, srcs[500], dirs[i])
	}
}
