package main

import (
	"fmt"
	"net/url"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/ferrylabs/ferry/internal/s3proxy"
	"github.com/ferrylabs/ferry/internal/s3test"
	"github.com/ferrylabs/ferry/manifest"
)

// restoreChunk is the ranged GET size of `ferry restore` (restore's default).
const restoreChunk = 64 * mib

// TestCLIRequestBudget counts the requests the server receives for a push
// and a restore of one step (issue "Count what a checkpoint costs"): R2
// bills every request, writes and lists most.
//
// Push of F files, P parts: one PUT per file up to the part size, and
// create + its parts + complete per larger file, plus at most 5 other
// requests (manifest read and write, listing, commit check). Restore of the
// latest step: one listing, one GET of the manifest, ranged GETs for the
// data, and nothing else (no HEAD per file). Retries are not counted.
func TestCLIRequestBudget(t *testing.T) {
	srv := s3test.Shared(t)
	view, px := srv.WithProxy(t, s3proxy.Config{})
	bucket := view.NewBucket(t)
	const prefix, step, partSize = "run", 100, 5 * mib
	url := "s3://" + bucket + "/" + prefix
	src := t.TempDir()
	sizes := map[string]int{
		"config.json": 1000, "empty.bin": 0, "exact.bin": partSize, "model.pt": 12*mib + 7,
		"rank0/optim.pt": 10 * mib, "rank1/optim.pt": partSize + 1,
	}
	var singles, multis, parts, gets int
	for name, n := range sizes {
		writeFile(t, filepath.Join(src, name), randomBytes(n, byte(len(name))))
		if n <= partSize {
			singles++
		} else {
			multis++
			parts += (n + partSize - 1) / partSize
		}
		gets += (n + restoreChunk - 1) / restoreChunk
	}

	px.Reset()
	ferry(t, view, "push", "--to", url, "--step", fmt.Sprint(step), "--part-size", "5MiB", "--state-dir", t.TempDir(), src).must(t, 0)
	push := tally(t, px.Requests(), manifest.DataPrefix(prefix))
	t.Logf("push of %d files (%d single, %d multipart with %d parts): %v", len(sizes), singles, multis, parts, push)
	within(t, "push: data PutObject", push.data[s3proxy.OpPutObject], singles)
	within(t, "push: CreateMultipartUpload", push.data[s3proxy.OpCreateMultipartUpload], multis)
	within(t, "push: UploadPart", push.data[s3proxy.OpUploadPart], parts)
	within(t, "push: CompleteMultipartUpload", push.data[s3proxy.OpCompleteMultipartUpload], multis)
	within(t, "push: other data requests", push.dataOther(), 0)
	within(t, "push: requests besides data uploads", push.otherTotal(), 5)
	// Once per store and state dir: the conditional-write check writes two
	// scratch objects, tries to replace each (refused), deletes them.
	within(t, "push: conditional-write check PutObject", push.scratch[s3proxy.OpPutObject], 4)
	within(t, "push: conditional-write check DeleteObject", push.scratch[s3proxy.OpDeleteObject], 2)
	// Behind the R2 rules, a write answered 429 costs the store a HEAD.
	within(t, "push: conditional-write check HeadObject", push.scratch[s3proxy.OpHeadObject], 2)
	scratchOther := 0
	for op, n := range push.scratch {
		if op != s3proxy.OpPutObject && op != s3proxy.OpDeleteObject && op != s3proxy.OpHeadObject {
			scratchOther += n
		}
	}
	within(t, "push: conditional-write check, other requests", scratchOther, 0)

	px.Reset()
	dst := filepath.Join(t.TempDir(), "out")
	ferry(t, view, "restore", "--from", url, "--to", dst).must(t, 0)
	sameTree(t, src, dst)
	rest := tally(t, px.Requests(), manifest.DataPrefix(prefix))
	t.Logf("restore of %d files: %v", len(sizes), rest)
	// Three listings, one page each: the manifests, the damage records
	// every restore of the latest step honours (restore/damaged.go, issue
	// 48), and one key of the data after the latest step (objects of a
	// newer step without a manifest are warned about: an upload in flight,
	// or a deleted manifest).
	within(t, "restore: ListObjectsV2", rest.other[s3proxy.OpListObjectsV2], 3)
	// Two GETs: the manifest, and the step's damage record read again just
	// before placing it (restore/crosscheck.go: a node does not place a
	// step another node found damaged meanwhile).
	within(t, "restore: manifest and damage record GETs", rest.other[s3proxy.OpGetObject], 2)
	within(t, "restore: other requests besides data", rest.otherTotal()-rest.other[s3proxy.OpListObjectsV2]-rest.other[s3proxy.OpGetObject], 0)
	within(t, "restore: ranged data GETs", rest.data[s3proxy.OpGetObject], gets)
	within(t, "restore: other data requests (HEAD...)", rest.dataOther(), 0)
}

// budget is a tally of requests by operation, split between data objects
// and the rest (manifests, listings), retries left out.
type budget struct {
	data, other map[string]int
	// scratch counts the requests of the conditional-write check.
	scratch map[string]int
	retries []string
}

func (b budget) dataOther() int {
	n := 0
	for op, c := range b.data {
		switch op {
		case s3proxy.OpPutObject, s3proxy.OpCreateMultipartUpload, s3proxy.OpUploadPart,
			s3proxy.OpCompleteMultipartUpload, s3proxy.OpGetObject:
		default:
			n += c
		}
	}
	return n
}

func (b budget) otherTotal() int {
	n := 0
	for _, c := range b.other {
		n += c
	}
	return n
}

func (b budget) String() string {
	show := func(m map[string]int) string {
		var s []string
		for op, n := range m {
			s = append(s, fmt.Sprintf("%s=%d", op, n))
		}
		sort.Strings(s)
		return strings.Join(s, " ")
	}
	s := fmt.Sprintf("data: %s; other: %s", show(b.data), show(b.other))
	if len(b.retries) > 0 {
		s += fmt.Sprintf("; %d retries not counted", len(b.retries))
	}
	return s
}

// tally counts requests. A request repeating one that failed (same
// operation, key and query after a 5xx, a 429 or no answer) is a retry and
// is left out.
func tally(t *testing.T, rs []s3proxy.Request, dataPrefix string) budget {
	t.Helper()
	b := budget{data: map[string]int{}, other: map[string]int{}, scratch: map[string]int{}}
	failed := map[string]bool{}
	for _, r := range rs {
		id := r.Op + " " + r.Key + "?" + r.RawQuery
		retry := failed[id]
		failed[id] = r.Status == 0 || r.Status >= 500 || r.Status == 429
		if retry {
			b.retries = append(b.retries, r.String())
			continue
		}
		switch {
		case strings.HasPrefix(r.Key, dataPrefix):
			b.data[r.Op]++
		case strings.Contains("/"+r.Key, "/scratch/condwrite-"):
			b.scratch[r.Op]++
		default:
			b.other[r.Op]++
		}
	}
	for _, r := range b.retries {
		t.Logf("retry: %s", r)
	}
	return b
}

// within fails t when got exceeds the budget.
func within(t *testing.T, what string, got, budget int) {
	t.Helper()
	if got > budget {
		t.Errorf("%s: %d requests, budget %d", what, got, budget)
	}
}

// TestCLIRestoreBarrierRequests counts what the restore barrier costs: two
// nodes restoring the latest step together, each makes the requests of a
// restore alone (TestCLIRequestBudget) plus its check-in (one PUT), one
// LIST of the step's check-ins per look, and one GET of the step's damage
// record per look that did not find every node checked in. Each node's
// --json says how many looks it took; the server saw exactly that.
func TestCLIRestoreBarrierRequests(t *testing.T) {
	srv := s3test.Shared(t)
	view, px := srv.WithProxy(t, s3proxy.Config{})
	run := "s3://" + view.NewBucket(t) + "/run"
	pushDCPStep(t, view, run, 4, 2)
	px.Reset()
	outs := make([]result, 2)
	var wg sync.WaitGroup
	for k := range outs {
		cmd := ferryCmd(t, view, "restore", "--from", run, "--to", t.TempDir(), "--json")
		cmd.Env = append(cmd.Env, "FERRY_NODES=2", fmt.Sprintf("FERRY_NODE_RANK=%d", k), "FERRY_RUN_ID=budget-1")
		wg.Go(func() { outs[k] = runCmd(t, cmd) })
	}
	wg.Wait()
	looks := 0
	for k, o := range outs {
		o.must(t, 0)
		var sum restoreSummary
		decodeJSON(t, o.stdout, &sum)
		if sum.Barrier == nil || len(sum.Barrier.Steps) != 1 || sum.Barrier.Steps[0].Outcome != "all checked in" {
			t.Fatalf("node %d: barrier %+v", k, sum.Barrier)
		}
		looks += sum.Barrier.Steps[0].Looks
	}
	checkins := manifest.CheckinsPrefix("run")
	damaged := manifest.DamagedKey("run", 4)
	var puts, lists, gets, data, other int
	for _, r := range px.Requests() {
		q, _ := url.ParseQuery(r.RawQuery)
		switch {
		case r.Op == s3proxy.OpPutObject && strings.HasPrefix(r.Key, checkins):
			puts++
		case r.Op == s3proxy.OpListObjectsV2 && strings.HasPrefix(q.Get("prefix"), checkins):
			lists++
		case r.Op == s3proxy.OpGetObject && r.Key == damaged:
			gets++
		case strings.HasPrefix(r.Key, manifest.DataPrefix("run")):
			data++
		default:
			other++
		}
	}
	t.Logf("2 nodes: %d looks; check-in PUTs %d, check-in LISTs %d, damage record GETs %d, data GETs %d, other %d", looks, puts, lists, gets, data, other)
	// Per node: one damage record GET before the barrier (crosscheck.go),
	// then one per look but the last, which found both nodes in: as many
	// GETs as looks.
	if puts != 2 || lists != looks || gets != looks {
		t.Errorf("barrier requests: %d check-in PUTs (want 2), %d LISTs (want %d looks), %d damage record GETs (want %d)", puts, lists, looks, gets, looks)
	}
	// Per node as alone: three LISTs and the manifest's GET.
	if other != 2*4 || data != 2*3 {
		t.Errorf("other requests %d (want 8), data GETs %d (want 6, the files of each node)", other, data)
	}
}
