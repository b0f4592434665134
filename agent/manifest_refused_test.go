package agent

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/agent/control"
	"github.com/ferrylabs/ferry/internal/s3proxy"
	"github.com/ferrylabs/ferry/internal/s3store"
	"github.com/ferrylabs/ferry/internal/s3test"
	"github.com/ferrylabs/ferry/manifest"
)

// Issue 47 item 3: a manifest the store or the validator refuses is never
// re-uploaded byte for byte in a loop. These tests run an agent against
// versitygw through the fault proxy and count what reaches the server.

// startProxiedAgent runs an agent whose store goes through an s3proxy in
// front of the shared server, on a flat layout of step-N folders.
func startProxiedAgent(t *testing.T) (*harness, *s3proxy.Proxy) {
	t.Helper()
	srv := s3test.Shared(t)
	view, px := srv.WithProxy(t, s3proxy.Config{})
	bucket := srv.NewBucket(t)
	counters := &s3store.Counters{}
	h := &harness{t: t, counters: counters, prefix: "run", watch: t.TempDir(), state: t.TempDir(),
		st: view.StoreWith(t, s3store.Config{Bucket: bucket, OnRequest: counters.Count})}
	h.start(func(o *Options) {
		o.Detect.Layout, o.Detect.StepPattern = "flat", `^step-(\d+)$`
		o.DrainTimeout = 5 * time.Second // a step still refused at the end is not drained for long
	})
	return h, px
}

// dataWrites counts, per data object of the run, the PUTs (whole
// objects) and UploadParts (parts) the proxy saw.
func dataWrites(px *s3proxy.Proxy) map[string]int {
	out := map[string]int{}
	for _, r := range px.Requests() {
		if (r.Op == s3proxy.OpPutObject || r.Op == s3proxy.OpUploadPart) && strings.HasPrefix(r.Key, "run/data/") {
			out[r.Op+" "+r.Key]++
		}
	}
	return out
}

// manifestPuts counts the PUTs of step n's manifest the proxy saw.
func manifestPuts(px *s3proxy.Proxy, n int64) int {
	key, c := manifest.ManifestKey("run", n), 0
	for _, r := range px.Requests() {
		if r.Op == s3proxy.OpPutObject && r.Key == key {
			c++
		}
	}
	return c
}

// writeStep writes step n: a small file (one PUT) and one of 6 MiB (two
// parts at the harness's 5 MiB part size).
func writeStep(t *testing.T, watch string, n int64) {
	t.Helper()
	dir := filepath.Join(watch, fmt.Sprintf("step-%d", n))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(uint64(n), 1))
	for name, size := range map[string]int{"small.bin": 300 << 10, "big.bin": 6 << 20} {
		b := make([]byte, size)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// checkSentOnce fails unless every data object was written exactly once:
// one PUT for the small file, one UploadPart per part of the big one.
func checkSentOnce(t *testing.T, px *s3proxy.Proxy, what string) {
	t.Helper()
	w := dataWrites(px)
	puts, parts := 0, 0
	for k, c := range w {
		if strings.HasPrefix(k, s3proxy.OpPutObject) {
			puts += c
		} else {
			parts += c
		}
	}
	if puts != 1 || parts != 2 {
		t.Fatalf("%s: data writes %v: want the small file PUT once and the big file's 2 parts once each", what, w)
	}
}

// The store refuses the manifest (403, then 400 for another step): the
// manifest is retried with backoff, the data objects are sent once, and
// once the store takes the manifest the step is committed, still without
// sending a data byte again. Before, every retry sent the small files
// again: their records were noted in the upload state but never saved,
// and each attempt reloads the state from disk.
func TestStoreRefusedManifestNotResent(t *testing.T) {
	for i, c := range []struct {
		status int
		code   string
	}{{403, "AccessDenied"}, {400, "InvalidRequest"}} {
		t.Run(fmt.Sprint(c.status), func(t *testing.T) {
			h, px := startProxiedAgent(t)
			n := int64(7 + i)
			if err := px.SetRules(s3proxy.Rule{Ops: []string{s3proxy.OpPutObject}, KeyPrefix: manifest.ManifestKey("run", n),
				Action: s3proxy.Status(c.status, c.code)}); err != nil {
				t.Fatal(err)
			}
			writeStep(t, h.watch, n)
			waitFor(t, "4 refused manifest PUTs", 30*time.Second, func() bool { return manifestPuts(px, n) >= 4 })
			checkSentOnce(t, px, "while the manifest is refused")
			// The 4th refusal may be on its way back to the agent when
			// the proxy counts it: status shows it once handled.
			waitFor(t, "status naming the refusal", 30*time.Second, func() bool {
				st := h.agent.Status()
				return len(st.Steps) == 1 && strings.Contains(st.Steps[0].Error, fmt.Sprint(c.status))
			})
			if err := px.SetRules(); err != nil {
				t.Fatal(err)
			}
			h.waitCommitted(n)
			checkSentOnce(t, px, "after the commit")
		})
	}
}

// The validator refuses the manifest (a link whose text is longer than a
// manifest records, though it resolves inside the step): the step fails
// for good after one upload, and nothing is sent again while the agent
// runs on, or while it drains at the end.
func TestValidatorRefusedManifestFailsOnce(t *testing.T) {
	h, px := startProxiedAgent(t)
	writeStep(t, h.watch, 9)
	long := strings.Repeat("./", 600) + "small.bin"
	if err := os.Symlink(long, filepath.Join(h.watch, "step-9", "alias")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "step 9 failed", 30*time.Second, func() bool {
		st := h.agent.Status()
		return len(st.Steps) == 1 && st.Steps[0].State == control.StateFailed
	})
	time.Sleep(2 * time.Second) // 20 of the harness's minimum backoffs
	st := h.agent.Status()
	if e := st.Steps[0].Error; !strings.Contains(e, "refusing invalid manifest") || st.Steps[0].Attempts != 1 {
		t.Errorf("step 9: %d attempts, error %q: want one attempt refused by the validator", st.Steps[0].Attempts, e)
	}
	checkSentOnce(t, px, "after the validator refused the manifest")
	if c := manifestPuts(px, 9); c != 0 {
		t.Errorf("%d PUTs of a manifest the validator refused", c)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	if left, _ := h.agent.Flush(ctx); len(left) != 1 {
		t.Errorf("flush: %v not committed, want step 9", left)
	}
	// On the way out (SIGTERM's drain) the step is not tried again either:
	// before, the drain retried every failed step back to back until the
	// drain timeout, sending its bytes each time.
	start := time.Now()
	h.stop()
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("the agent took %v to stop: the drain waited for a step that failed for good", took.Round(time.Millisecond))
	}
	checkSentOnce(t, px, "after the drain")
}
