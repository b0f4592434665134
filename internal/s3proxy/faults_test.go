package s3proxy_test

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/agent/detect"
	"github.com/ferrylabs/ferry/internal/s3proxy"
	"github.com/ferrylabs/ferry/internal/s3store"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/internal/store/storetest"
	"github.com/ferrylabs/ferry/manifest"
	"github.com/ferrylabs/ferry/restore"
	"github.com/ferrylabs/ferry/uploader"
)

const mib = 1 << 20

// faults returns the recorded requests the proxy injected a fault into.
func faults(px *s3proxy.Proxy) []s3proxy.Request {
	var out []s3proxy.Request
	for _, r := range px.Requests() {
		if r.Fault != "" {
			out = append(out, r)
		}
	}
	return out
}

// TestSlowDownRetried answers the first two UploadPart attempts with 503
// SlowDown: s3store retries them and the upload completes.
func TestSlowDownRetried(t *testing.T) {
	t.Parallel()
	f := newFixture(t, s3proxy.Config{Rules: []s3proxy.Rule{
		{Ops: []string{s3proxy.OpUploadPart}, Times: 2, Action: s3proxy.SlowDown()},
	}})
	st := f.store(t)
	data := randomBytes(1, 2*5*mib+10)
	id, parts := uploadParts(t, st, "ckpt", data, 5*mib)
	if _, err := st.CompleteMultipart(t.Context(), "ckpt", id, parts); err != nil {
		t.Fatal(err)
	}
	if got := storetest.MustGet(t, f.direct(t), "ckpt", 0, -1); !bytes.Equal(got, data) {
		t.Fatal("object differs")
	}
	if n := f.px.Counts()[s3proxy.OpUploadPart]; n != len(parts)+2 {
		t.Errorf("%d UploadPart requests for %d parts, want 2 retries more", n, len(parts))
	}
	fs := faults(f.px)
	if len(fs) != 2 || fs[0].Status != 503 || fs[0].Fault != "status 503 SlowDown" {
		t.Errorf("faults %v", fs)
	}
}

// TestErrorStatusesRetried checks 500 InternalError and 429 on other
// operations: each is retried once.
func TestErrorStatusesRetried(t *testing.T) {
	t.Parallel()
	f := newFixture(t, s3proxy.Config{Rules: []s3proxy.Rule{
		{Ops: []string{s3proxy.OpPutObject}, Times: 1, Action: s3proxy.InternalError()},
		{Ops: []string{s3proxy.OpHeadObject}, Times: 1, Action: s3proxy.TooManyRequests()},
		{Ops: []string{s3proxy.OpListObjectsV2}, Times: 1, Action: s3proxy.SlowDown()},
	}})
	st := f.store(t)
	put(t, st, "k", []byte("value"))
	if _, err := st.Head(t.Context(), "k"); err != nil {
		t.Fatal(err)
	}
	if err := st.List(t.Context(), "", "", 0, func(store.ObjectInfo) error { return nil }); err != nil {
		t.Fatal(err)
	}
	for op, n := range f.px.Counts() {
		if n != 2 {
			t.Errorf("%d %s requests, want 2", n, op)
		}
	}
}

// TestResetMidResponse cuts a GetObject body after 1000 bytes: the reader
// ferry gets fails rather than ending early, and the next GET is whole.
func TestResetMidResponse(t *testing.T) {
	t.Parallel()
	f := newFixture(t, s3proxy.Config{Rules: []s3proxy.Rule{
		{Ops: []string{s3proxy.OpGetObject}, Times: 1, Action: s3proxy.ResetMidResponse(1000)},
	}})
	data := randomBytes(2, 256<<10)
	put(t, f.direct(t), "obj", data)
	st := f.store(t)
	rc, err := st.Get(t.Context(), "obj", 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err == nil {
		t.Fatalf("read %d bytes without error through a reset", len(got))
	}
	if len(got) > 1000 || !bytes.Equal(got, data[:len(got)]) {
		t.Errorf("read %d bytes before the reset, want a prefix of at most 1000", len(got))
	}
	if again := storetest.MustGet(t, st, "obj", 0, -1); !bytes.Equal(again, data) {
		t.Error("second GET differs")
	}
}

// TestResetMidRequest cuts a PutObject body halfway and resets: s3store
// rewinds the body and retries.
func TestResetMidRequest(t *testing.T) {
	t.Parallel()
	f := newFixture(t, s3proxy.Config{Rules: []s3proxy.Rule{
		{Ops: []string{s3proxy.OpPutObject}, Times: 1, Action: s3proxy.ResetMidRequest(-1)},
	}})
	data := randomBytes(3, 1*mib)
	put(t, f.store(t), "obj", data)
	if got := storetest.MustGet(t, f.direct(t), "obj", 0, -1); !bytes.Equal(got, data) {
		t.Error("object differs")
	}
	if n := f.px.Counts()[s3proxy.OpPutObject]; n != 2 {
		t.Errorf("%d PutObject requests, want 2", n)
	}
}

// TestResetBeforeResponse lets the server store an object, then resets the
// connection instead of answering: the retry must still succeed.
func TestResetBeforeResponse(t *testing.T) {
	t.Parallel()
	f := newFixture(t, s3proxy.Config{Rules: []s3proxy.Rule{
		{Ops: []string{s3proxy.OpPutObject}, Times: 1, Action: s3proxy.ResetBeforeResponse()},
	}})
	put(t, f.store(t), "obj", []byte("data"))
	// Behind the shared server's R2 rules proxy (s3test.EnvR2Rules) a
	// retry within a second of the write is answered 429, as R2 would,
	// and retried again: leave those out.
	var rs []s3proxy.Request
	for _, r := range f.px.Requests() {
		if r.Status != http.StatusTooManyRequests {
			rs = append(rs, r)
		}
	}
	if len(rs) != 2 || rs[0].Fault != "reset before response" || rs[0].Status != 0 || rs[1].Status != 200 {
		t.Errorf("requests %v", rs)
	}
}

// pushDir pushes dir as step through st with 5 MiB parts.
func pushDir(t *testing.T, st store.Store, prefix string, step int64, dir string) uploader.PushResult {
	t.Helper()
	s, _, err := detect.Gather([]string{dir}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.Number = step
	dest := uploader.Destination{Store: st, Location: "s3://test/" + prefix, Prefix: prefix}
	res, err := dest.Push(t.Context(), s, uploader.PushOptions{Upload: uploader.Options{PartSize: 5 * mib, Concurrency: 4}})
	if err != nil {
		t.Fatalf("push: %v", err)
	}
	return res
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func sameFile(t *testing.T, path string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s: %d bytes differ from the %d pushed", path, len(got), len(want))
	}
}

// TestRestoreSurvivesBrokenBodies breaks three data GETs in three ways
// (reset, short but well-formed body, stall then reset): restore fetches
// the rest of each range again and the files come out whole.
func TestRestoreSurvivesBrokenBodies(t *testing.T) {
	t.Parallel()
	f := newFixture(t, s3proxy.Config{})
	src := t.TempDir()
	big, small := randomBytes(4, 12*mib+5), randomBytes(5, 100<<10)
	writeFile(t, filepath.Join(src, "model.pt"), big)
	writeFile(t, filepath.Join(src, "rank0/optim.pt"), small)
	pushDir(t, f.direct(t), "run", 7, src)

	data := []string{s3proxy.OpGetObject}
	prefix := manifest.DataPrefix("run")
	if err := f.px.SetRules(
		s3proxy.Rule{Ops: data, KeyPrefix: prefix, Times: 1, Action: s3proxy.ResetMidResponse(4096)},
		s3proxy.Rule{Ops: data, KeyPrefix: prefix, Times: 1, Action: s3proxy.TruncateBody(1000)},
		s3proxy.Rule{Ops: data, KeyPrefix: prefix, Times: 1, Action: s3proxy.StallMidResponse(1000, 200*time.Millisecond)},
	); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "out")
	res, err := restore.Restore(t.Context(), restore.Options{
		Store: f.store(t), Prefix: "run", Dir: dst, Step: restore.LatestStep, ChunkSize: 4 * mib,
	})
	if err != nil {
		t.Fatalf("restore through broken bodies: %v", err)
	}
	sameFile(t, filepath.Join(dst, "model.pt"), big)
	sameFile(t, filepath.Join(dst, "rank0/optim.pt"), small)
	if n := len(faults(f.px)); n != 3 {
		t.Errorf("%d faults injected, want 3", n)
	}
	t.Logf("restore: %+v; GETs %d", res, f.px.Counts()[s3proxy.OpGetObject])
}

// TestRestoreCatchesFlippedByte corrupts one byte of every data GET: the
// BLAKE3 check fails the restore, and the file already at the final path
// keeps its old content.
func TestRestoreCatchesFlippedByte(t *testing.T) {
	t.Parallel()
	f := newFixture(t, s3proxy.Config{})
	src := t.TempDir()
	writeFile(t, filepath.Join(src, "model.pt"), randomBytes(6, 3*mib))
	pushDir(t, f.direct(t), "run", 1, src)
	if err := f.px.SetRules(s3proxy.Rule{
		Ops: []string{s3proxy.OpGetObject}, KeyPrefix: manifest.DataPrefix("run"), Action: s3proxy.FlipByte(100),
	}); err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	old := []byte("the previous checkpoint")
	writeFile(t, filepath.Join(dst, "model.pt"), old)
	_, err := restore.Restore(t.Context(), restore.Options{Store: f.store(t), Prefix: "run", Dir: dst, Step: restore.LatestStep})
	if err == nil || !strings.Contains(err.Error(), "BLAKE3") {
		t.Fatalf("restore of a corrupted body: %v, want a BLAKE3 mismatch", err)
	}
	sameFile(t, filepath.Join(dst, "model.pt"), old)
	entries, _ := os.ReadDir(dst)
	if len(entries) != 1 {
		t.Errorf("target directory holds %d entries after the failure, want only model.pt", len(entries))
	}
	if len(faults(f.px)) == 0 {
		t.Error("no byte was flipped")
	}
}

// TestTruncateBodyIsWellFormed shows why TruncateBody is nasty: the SDK
// returns the short body without any error.
func TestTruncateBodyIsWellFormed(t *testing.T) {
	t.Parallel()
	f := newFixture(t, s3proxy.Config{Rules: []s3proxy.Rule{
		{Ops: []string{s3proxy.OpGetObject}, Times: 1, Action: s3proxy.TruncateBody(10)},
	}})
	data := randomBytes(7, 4096)
	put(t, f.direct(t), "obj", data)
	got := storetest.MustGet(t, f.store(t), "obj", 0, -1)
	if !bytes.Equal(got, data[:10]) {
		t.Errorf("read %d bytes, want the first 10", len(got))
	}
}

// TestDelayAndStallBounded checks that a delay delays, that a stall lasts
// only as long as the client waits, and that Close ends a stall at once.
func TestDelayAndStallBounded(t *testing.T) {
	t.Parallel()
	f := newFixture(t, s3proxy.Config{Rules: []s3proxy.Rule{
		{Ops: []string{s3proxy.OpHeadObject}, Times: 1, Action: s3proxy.Delay(300 * time.Millisecond)},
		{Ops: []string{s3proxy.OpHeadObject}, Times: 1, Action: s3proxy.Stall(time.Minute)},
	}})
	put(t, f.direct(t), "obj", []byte("x"))
	st := f.store(t)
	start := time.Now()
	if _, err := st.Head(t.Context(), "obj"); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Errorf("delayed Head took %v", d)
	}

	impatient := f.view.StoreWith(t, s3store.Config{Bucket: f.bucket, MaxAttempts: 1, ResponseHeaderTimeout: 300 * time.Millisecond})
	start = time.Now()
	if _, err := impatient.Head(t.Context(), "obj"); err == nil {
		t.Fatal("Head through a stall succeeded")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("stalled Head took %v with a 300ms timeout", d)
	}
	start = time.Now()
	if err := f.px.Close(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Close took %v with a stall of a minute in progress", d)
	}
}

// TestSetRulesWhileBusy changes the rules while requests are in flight
// (run with -race).
func TestSetRulesWhileBusy(t *testing.T) {
	t.Parallel()
	f := newFixture(t, s3proxy.Config{})
	st := f.store(t)
	put(t, st, "obj", []byte("x"))
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				if _, err := st.Head(t.Context(), "obj"); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for i := range 50 {
		rules := []s3proxy.Rule{{Ops: []string{s3proxy.OpHeadObject}, Probability: 0.5, Action: s3proxy.Delay(time.Millisecond)}}
		if i%2 == 1 {
			rules = nil
		}
		if err := f.px.SetRules(rules...); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Millisecond)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := f.px.Counts()[s3proxy.OpHeadObject]; n != 160 {
		t.Errorf("%d HeadObject requests, want 160", n)
	}
}

// TestBarrier: three HEADs wait for each other and pass together; one alone
// passes after the barrier's timeout.
func TestBarrier(t *testing.T) {
	t.Parallel()
	f := newFixture(t, s3proxy.Config{Rules: []s3proxy.Rule{
		{Ops: []string{s3proxy.OpHeadObject}, KeyPrefix: "together", Times: 3, Action: s3proxy.Barrier(3, time.Minute)},
		{Ops: []string{s3proxy.OpHeadObject}, KeyPrefix: "alone", Times: 1, Action: s3proxy.Barrier(2, 300*time.Millisecond)},
	}})
	put(t, f.direct(t), "together", []byte("x"))
	put(t, f.direct(t), "alone", []byte("x"))
	st := f.store(t)
	done := make(chan time.Time, 3)
	began := time.Now()
	for i := range 3 {
		go func() {
			time.Sleep(time.Duration(i) * 200 * time.Millisecond)
			if _, err := st.Head(t.Context(), "together"); err != nil {
				t.Error(err)
			}
			done <- time.Now()
		}()
	}
	first := <-done
	if d := first.Sub(began); d < 400*time.Millisecond {
		t.Fatalf("a request passed after %v, before the third (sent at 400ms) arrived", d)
	}
	for range 2 {
		if d := (<-done).Sub(first); d > 100*time.Millisecond {
			t.Errorf("requests released %v apart; a barrier releases them together", d)
		}
	}
	start := time.Now()
	if _, err := st.Head(t.Context(), "alone"); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Errorf("a barrier of 2 passed one request after %v, before its timeout", d)
	}
}
