package main

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/internal/follow"
	"github.com/ferrylabs/ferry/internal/remote"
	"github.com/ferrylabs/ferry/internal/s3test"
	"github.com/ferrylabs/ferry/manifest"
)

// pushFollowStep pushes a folder of three files as step n and returns it.
func pushFollowStep(t *testing.T, srv *s3test.Server, url string, n int64) string {
	t.Helper()
	src := filepath.Join(t.TempDir(), "src")
	seed := byte(n / 100)
	writeFile(t, filepath.Join(src, "model.bin"), randomBytes(200<<10, seed))
	writeFile(t, filepath.Join(src, "optim.bin"), randomBytes(150<<10, seed+100))
	writeFile(t, filepath.Join(src, "meta", "config.json"), []byte(`{"step":`+itoa(n)+`}`))
	ferry(t, srv, "push", "--to", url, "--step", itoa(n), "--state-dir", t.TempDir(), src).must(t, 0)
	return src
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// followOnce runs follow --once --json and decodes its summary.
func followOnce(t *testing.T, srv *s3test.Server, args ...string) followSummary {
	t.Helper()
	r := ferry(t, srv, append([]string{"follow", "--once", "--json"}, args...)...).must(t, 0)
	var sum followSummary
	decodeJSON(t, r.stdout, &sum)
	return sum
}

func placedSteps(sum followSummary) []int64 {
	var out []int64
	for _, p := range sum.Placed {
		out = append(out, p.Step)
	}
	return out
}

// stepFolders lists the folders of dir named as steps.
func stepFolders(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
			out = append(out, e.Name())
		}
	}
	return out
}

// exactTree fails t unless got holds exactly want's files, with its bytes.
func exactTree(t *testing.T, want, got string) {
	t.Helper()
	sameTree(t, want, got)
	w, g := listFiles(t, want), listFiles(t, got)
	slices.Sort(w)
	slices.Sort(g)
	if !slices.Equal(w, g) {
		t.Errorf("%s holds %v, want %v", got, g, w)
	}
}

// TestFollowOnce: follow places three committed steps, in order, each in
// its own folder with the bytes pushed, running --exec for each with the
// step in its environment; a poll with nothing new is one LIST; a fourth
// step and a revision of the second are placed next (the revision from
// the files already there, nothing downloaded); --keep 2 leaves two.
func TestFollowOnce(t *testing.T) {
	srv := s3test.Shared(t)
	bucket := srv.NewBucket(t)
	url := "s3://" + bucket + "/run"
	srcs := map[int64]string{}
	for _, n := range []int64{100, 200, 300} {
		srcs[n] = pushFollowStep(t, srv, url, n)
	}
	dir := filepath.Join(t.TempDir(), "eval")
	writeFile(t, filepath.Join(dir, "mine", "notes.txt"), []byte("not follow's"))
	seen := filepath.Join(t.TempDir(), "seen")
	execArgs := []string{"--from", url, "--to", dir, "--exec", `echo "$FERRY_STEP $FERRY_REVISION $FERRY_STEP_DIR" >> ` + seen}

	sum := followOnce(t, srv, execArgs...)
	if got := placedSteps(sum); !slices.Equal(got, []int64{100, 200, 300}) {
		t.Fatalf("placed %v, want 100 200 300 in order; %+v", got, sum)
	}
	for n, src := range srcs {
		exactTree(t, src, follow.StepDir(dir, n))
	}
	wantSeen := func(lines ...string) {
		t.Helper()
		data, _ := os.ReadFile(seen)
		if got := strings.Split(strings.TrimSpace(string(data)), "\n"); !slices.Equal(got, lines) {
			t.Fatalf("--exec saw %q, want %q", got, lines)
		}
	}
	line := func(n int64, rev string) string { return itoa(n) + " " + rev + " " + follow.StepDir(dir, n) }
	wantSeen(line(100, "0"), line(200, "0"), line(300, "0"))

	// A restart with nothing new: one LIST, nothing downloaded, no command.
	sum = followOnce(t, srv, execArgs...)
	if len(sum.Placed) != 0 || totalRequests(sum.Requests) != 1 || sum.Requests["ListObjectsV2"] != 1 {
		t.Fatalf("a poll with nothing new: placed %v, requests %v; want nothing and one LIST", placedSteps(sum), sum.Requests)
	}
	wantSeen(line(100, "0"), line(200, "0"), line(300, "0"))

	// A fourth step, and a revision of step 200 without optim.bin.
	srcs[400] = pushFollowStep(t, srv, url, 400)
	st := srv.Store(t, bucket)
	_, wrote, err := remote.Revise(context.Background(), st, "run", 200, func(cur *manifest.Manifest) (*manifest.Manifest, error) {
		next := *cur
		next.Files = slices.DeleteFunc(slices.Clone(cur.Files), func(f manifest.File) bool { return f.Path == "optim.bin" })
		return &next, nil
	})
	if err != nil || !wrote {
		t.Fatalf("revise step 200: wrote %v, %v", wrote, err)
	}
	if err := os.Remove(filepath.Join(srcs[200], "optim.bin")); err != nil {
		t.Fatal(err)
	}
	sum = followOnce(t, srv, execArgs...)
	if got := placedSteps(sum); !slices.Equal(got, []int64{200, 400}) {
		t.Fatalf("placed %v, want the revision of 200, then 400", got)
	}
	if p := sum.Placed[0]; p.Revision != 1 || p.BytesDownloaded != 0 {
		t.Errorf("revision of 200: %+v; want revision 1 placed from the files in place (0 bytes downloaded)", p)
	}
	for n, src := range srcs {
		exactTree(t, src, follow.StepDir(dir, n))
	}
	wantSeen(line(100, "0"), line(200, "0"), line(300, "0"), line(200, "1"), line(400, "0"))

	// --keep 2: the two newest step folders stay; a folder follow did not
	// make is never touched.
	sum = followOnce(t, srv, "--from", url, "--to", dir, "--keep", "2")
	if len(sum.Placed) != 0 || !slices.Equal(sum.Removed, []int64{100, 200}) {
		t.Errorf("--keep 2: placed %v, removed %v; want nothing placed, 100 and 200 removed", placedSteps(sum), sum.Removed)
	}
	if got := stepFolders(t, dir); !slices.Equal(got, []string{"300", "400", "mine"}) {
		t.Errorf("folders after --keep 2: %v, want 300 400 and the user's own", got)
	}
}

// TestFollowDamagedSkipped: a step with a flipped byte is skipped loudly
// and recorded in the bucket, the others are placed, nothing of it is
// left, and the next poll does not try it again (one LIST).
func TestFollowDamagedSkipped(t *testing.T) {
	srv := s3test.Shared(t)
	_, url, _, _ := damagedRun(t, srv) // steps 500 and 600, 600 damaged
	dir := filepath.Join(t.TempDir(), "eval")
	r := ferry(t, srv, "follow", "--once", "--json", "--from", url, "--to", dir).must(t, 0)
	var sum followSummary
	decodeJSON(t, r.stdout, &sum)
	if got := placedSteps(sum); !slices.Equal(got, []int64{500}) || len(sum.Skipped) != 1 || sum.Skipped[0].Step != 600 || sum.Skipped[0].Record != "recorded" {
		t.Fatalf("placed %v, skipped %+v; want 500 placed, 600 skipped and recorded", got, sum.Skipped)
	}
	if !strings.Contains(r.stderr, "step is damaged: skipping it") {
		t.Errorf("no warning for the damaged step:\n%s", r.stderr)
	}
	if got := stepFolders(t, dir); !slices.Equal(got, []string{"500"}) {
		t.Errorf("folders %v, want 500 only", got)
	}
	sum = followOnce(t, srv, "--from", url, "--to", dir)
	if len(sum.Placed)+len(sum.Skipped) != 0 || totalRequests(sum.Requests) != 1 {
		t.Errorf("second poll placed %v, skipped %v, requests %v; want one LIST and nothing else", placedSteps(sum), sum.Skipped, sum.Requests)
	}
}

// TestFollowSIGTERM: SIGTERM while --exec runs stops follow with exit 0;
// the step is in place, and the next start runs its command again
// without downloading it again.
func TestFollowSIGTERM(t *testing.T) {
	srv := s3test.Shared(t)
	bucket := srv.NewBucket(t)
	url := "s3://" + bucket + "/run"
	src := pushFollowStep(t, srv, url, 100)
	dir := filepath.Join(t.TempDir(), "eval")
	started := filepath.Join(t.TempDir(), "started")
	cmd := ferryCmd(t, srv, "follow", "--from", url, "--to", dir, "--interval", "100ms",
		"--exec", "touch "+started+"; exec sleep 60")
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the command to start", 20*time.Second, func() bool { _, err := os.Stat(started); return err == nil })
	begin := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("follow after SIGTERM: %v, want exit 0\n%s", err, out.String())
	}
	if d := time.Since(begin); d > 10*time.Second {
		t.Errorf("follow took %v to stop", d)
	}
	exactTree(t, src, follow.StepDir(dir, 100))

	seen := filepath.Join(t.TempDir(), "seen")
	sum := followOnce(t, srv, "--from", url, "--to", dir, "--exec", `echo "$FERRY_STEP" >> `+seen)
	if got := placedSteps(sum); !slices.Equal(got, []int64{100}) || sum.Placed[0].BytesDownloaded != 0 {
		t.Fatalf("after the stop: placed %+v; want step 100 again, nothing downloaded", sum.Placed)
	}
	if data, _ := os.ReadFile(seen); string(data) != "100\n" {
		t.Errorf("the interrupted step's command ran %q, want once more", data)
	}
}
