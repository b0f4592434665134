package s3proxy_test

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/ferrylabs/ferry/internal/s3proxy"
	"github.com/ferrylabs/ferry/internal/s3test"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/internal/store/storetest"
)

// rateFixture is an R2 fixture whose per-key write interval is interval.
func rateFixture(t *testing.T, interval time.Duration, rules ...s3proxy.Rule) *fixture {
	t.Helper()
	return newFixture(t, s3proxy.Config{R2Rules: true, R2KeyWriteInterval: interval, Rules: rules})
}

// skipBehindR2 skips a test of intervals under a second when the shared
// server sits behind an R2 rules proxy of its own (s3test.EnvR2Rules),
// which holds every key a second after a write whatever this proxy does.
func skipBehindR2(t *testing.T) {
	t.Helper()
	if s3test.R2Rules() {
		t.Skip("the shared server's R2 rules proxy holds each key for a second: this test is about shorter intervals")
	}
}

// noRetry makes the SDK client send a request once, so that a test sees
// each answer.
func noRetry(o *s3.Options) { o.Retryer = aws.NopRetryer{} }

// rawPut PUTs body at key with the SDK, once, create-only if exclusive, and
// returns the HTTP status and S3 error code.
func (f *fixture) rawPut(t *testing.T, key string, exclusive bool) (int, string) {
	t.Helper()
	in := &s3.PutObjectInput{Bucket: aws.String(f.bucket), Key: aws.String(key), Body: bytes.NewReader([]byte("v"))}
	if exclusive {
		in.IfNoneMatch = aws.String("*")
	}
	_, err := f.view.Client(t).PutObject(t.Context(), in, noRetry)
	return answer(t, err)
}

// answer returns the HTTP status and S3 error code of an SDK call's error.
func answer(t *testing.T, err error) (int, string) {
	t.Helper()
	if err == nil {
		return http.StatusOK, ""
	}
	var respErr *smithyhttp.ResponseError
	if !errors.As(err, &respErr) {
		t.Fatalf("no HTTP answer: %v", err)
	}
	code := ""
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		code = apiErr.ErrorCode()
	}
	return respErr.HTTPStatusCode(), code
}

// throttled fails t unless status and code are the per-key write rate's.
func throttled(t *testing.T, what string, status int, code string) {
	t.Helper()
	if status != http.StatusTooManyRequests || code != "TooManyRequests" {
		t.Errorf("%s: %d %s, want 429 TooManyRequests", what, status, code)
	}
}

// TestR2KeyWriteRate: a second write to a key within the interval gets
// R2's 429, whatever the operation; other keys, reads and deletes are not
// held; a 412 holds the key like a write, an answer that wrote nothing
// does not. None of it is a violation.
func TestR2KeyWriteRate(t *testing.T) {
	t.Parallel()
	f := rateFixture(t, time.Hour)
	client := f.view.Client(t)
	put(t, f.direct(t), "d", []byte("there before"))
	dWritten := time.Now()
	if status, code := f.rawPut(t, "a", false); status != http.StatusOK {
		t.Fatalf("first PUT: %d %s", status, code)
	}
	_, err := client.PutObject(t.Context(), &s3.PutObjectInput{Bucket: aws.String(f.bucket), Key: aws.String("a"), Body: strings.NewReader("w")}, noRetry)
	status, code := answer(t, err)
	throttled(t, "second PUT", status, code)
	if err == nil || !strings.Contains(err.Error(), "Reduce your concurrent request rate for the same object.") {
		t.Errorf("second PUT: %v lacks R2's message", err)
	}
	if status, code := f.rawPut(t, "b", false); status != http.StatusOK {
		t.Errorf("PUT of another key: %d %s", status, code)
	}
	_, err = client.CopyObject(t.Context(), &s3.CopyObjectInput{Bucket: aws.String(f.bucket), Key: aws.String("b"),
		CopySource: aws.String(f.bucket + "/a")}, noRetry)
	status, code = answer(t, err)
	throttled(t, "CopyObject onto a key just written", status, code)

	// A completion is a write to its key.
	id, parts := uploadParts(t, f.store(t), "c", []byte("one small part"), 5*mib)
	complete := func() error {
		cp := make([]types.CompletedPart, len(parts))
		for i, p := range parts {
			cp[i] = types.CompletedPart{PartNumber: aws.Int32(p.Number), ETag: aws.String(p.ETag), ChecksumCRC32C: aws.String(p.CRC32C)}
		}
		_, err := client.CompleteMultipartUpload(t.Context(), &s3.CompleteMultipartUploadInput{Bucket: aws.String(f.bucket), Key: aws.String("c"),
			UploadId: aws.String(id), MultipartUpload: &types.CompletedMultipartUpload{Parts: cp}}, noRetry)
		return err
	}
	if err := complete(); err != nil {
		t.Fatalf("complete: %v", err)
	}
	status, code = f.rawPut(t, "c", false)
	throttled(t, "PUT onto a key just completed", status, code)

	// Reads and deletes pass.
	if _, err := client.HeadObject(t.Context(), &s3.HeadObjectInput{Bucket: aws.String(f.bucket), Key: aws.String("a")}, noRetry); err != nil {
		t.Errorf("HEAD: %v", err)
	}
	if _, err := client.DeleteObject(t.Context(), &s3.DeleteObjectInput{Bucket: aws.String(f.bucket), Key: aws.String("a")}, noRetry); err != nil {
		t.Errorf("DELETE: %v", err)
	}

	// A create-only PUT the server answers 412 holds the key ("d" was
	// written at the start, bypassing this proxy).
	if s3test.R2Rules() {
		// The shared server's own R2 proxy, behind this one, holds "d"
		// for a second after that write.
		time.Sleep(time.Until(dWritten.Add(time.Second + 50*time.Millisecond)))
	}
	if status, code := f.rawPut(t, "d", true); status != http.StatusPreconditionFailed {
		t.Fatalf("create-only PUT of an existing key: %d %s, want 412", status, code)
	}
	status, code = f.rawPut(t, "d", true)
	throttled(t, "create-only PUT after a 412", status, code)

	// A write that wrote nothing (no such bucket) does not.
	for i := range 2 {
		_, err := client.PutObject(t.Context(), &s3.PutObjectInput{Bucket: aws.String(f.bucket + "-none"), Key: aws.String("k"),
			Body: strings.NewReader("v")}, noRetry)
		if status, code := answer(t, err); status != http.StatusNotFound {
			t.Errorf("PUT %d into a missing bucket: %d %s, want 404", i, status, code)
		}
	}

	if v := f.px.Violations(); len(v) != 0 {
		t.Errorf("violations: %v", v)
	}
	reqs, n := f.px.Throttled()
	if n != 4 || len(reqs) != 4 {
		t.Fatalf("%d throttled (%d recorded), want 4: %v", n, len(reqs), reqs)
	}
	want := []string{"a", "b", "c", "d"}
	for i, r := range reqs {
		if r.Key != want[i] || r.Status != http.StatusTooManyRequests || !strings.Contains(r.Throttled, "after the last write to the key") {
			t.Errorf("throttled request %d: %v", i, r)
		}
	}
}

// TestR2KeyWriteRateInterval: a write once the interval has passed is let
// through, and an answered 429 does not extend the interval.
func TestR2KeyWriteRateInterval(t *testing.T) {
	t.Parallel()
	skipBehindR2(t)
	const interval = 200 * time.Millisecond
	f := rateFixture(t, interval)
	start := time.Now()
	if status, code := f.rawPut(t, "a", false); status != http.StatusOK {
		t.Fatalf("first PUT: %d %s", status, code)
	}
	status, code := f.rawPut(t, "a", false)
	if time.Since(start) < interval {
		throttled(t, "second PUT", status, code)
	}
	time.Sleep(interval - time.Since(start) + 20*time.Millisecond)
	if status, code := f.rawPut(t, "a", false); status != http.StatusOK {
		t.Errorf("PUT after the interval: %d %s", status, code)
	}
	time.Sleep(interval + 20*time.Millisecond)
	if status, code := f.rawPut(t, "a", false); status != http.StatusOK {
		t.Errorf("PUT after another interval: %d %s", status, code)
	}
	if v := f.px.Violations(); len(v) != 0 {
		t.Errorf("violations: %v", v)
	}
}

// TestR2KeyWriteRateRace releases n create-only PUTs of one key at the same
// moment: exactly one is answered 200, each other 412 or 429.
func TestR2KeyWriteRateRace(t *testing.T) {
	t.Parallel()
	const n = 16
	f := rateFixture(t, 0, s3proxy.Rule{Ops: []string{s3proxy.OpPutObject}, Times: n, Action: s3proxy.Barrier(n, time.Minute)})
	statuses := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			statuses[i], _ = f.rawPut(t, "claim", true)
		}()
	}
	wg.Wait()
	tally := map[int]int{}
	for _, s := range statuses {
		tally[s]++
	}
	t.Logf("answers: %v", tally)
	if tally[http.StatusOK] != 1 || tally[http.StatusOK]+tally[http.StatusPreconditionFailed]+tally[http.StatusTooManyRequests] != n {
		t.Errorf("answers %v; want one 200, the others 412 or 429", tally)
	}
	if _, throttled := f.px.Throttled(); throttled != tally[http.StatusTooManyRequests] {
		t.Errorf("the proxy throttled %d, the clients saw %d 429s", throttled, tally[http.StatusTooManyRequests])
	}
	if v := f.px.Violations(); len(v) != 0 {
		t.Errorf("violations: %v", v)
	}
}

// TestR2KeyWriteRateStoreRace: n creators racing with ferry's store meet
// the write rate (all but one PUT answered 429) and end with one winner and
// n-1 ErrPreconditionFailed (the store looks for the object after a 429
// instead of waiting for a write slot of its own); the object is the
// winner's.
func TestR2KeyWriteRateStoreRace(t *testing.T) {
	t.Parallel()
	const n = 8
	f := rateFixture(t, 100*time.Millisecond, s3proxy.Rule{Ops: []string{s3proxy.OpPutObject}, Times: n, Action: s3proxy.Barrier(n, time.Minute)})
	st := f.store(t)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := []byte(fmt.Sprint("node ", i))
			_, errs[i] = st.Put(t.Context(), "claim.json", bytes.NewReader(body), int64(len(body)),
				store.PutOptions{IfNoneMatch: true, CRC32C: store.CRC32C(body)})
		}()
	}
	wg.Wait()
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil && winner < 0:
			winner = i
		case err == nil:
			t.Errorf("nodes %d and %d both created the object", winner, i)
		case !errors.Is(err, store.ErrPreconditionFailed):
			t.Errorf("node %d: %v, want a lost race", i, err)
		}
	}
	if winner < 0 {
		t.Fatal("nobody created the object")
	}
	_, throttled := f.px.Throttled()
	t.Logf("node %d won; %d requests in all, %d answered 429", winner, f.px.Counts()[s3proxy.OpPutObject], throttled)
	if throttled == 0 {
		t.Error("no PUT was answered 429: the race did not meet the rate rule")
	}
	if got := string(storetest.MustGet(t, f.direct(t), "claim.json", 0, -1)); got != fmt.Sprint("node ", winner) {
		t.Errorf("object %q, want node %d's", got, winner)
	}
	if v := f.px.Violations(); len(v) != 0 {
		t.Errorf("violations: %v", v)
	}
}

// TestConditionalPutAfter429: ferry's store answers a conditional PUT that
// got 429 from what a HEAD of the key then finds: it sends the PUT again
// while the precondition still holds, and reports a lost race, without
// another PUT, once it fails.
func TestConditionalPutAfter429(t *testing.T) {
	t.Parallel()
	var rules []s3proxy.Rule
	for _, key := range []string{"create", "exists", "replace", "changed"} {
		rules = append(rules, s3proxy.Rule{Ops: []string{s3proxy.OpPutObject}, KeyPrefix: key, Times: 1, Action: s3proxy.TooManyRequests()})
	}
	f := newFixture(t, s3proxy.Config{Rules: rules})
	st, direct := f.store(t), f.direct(t)
	putOpts := func(key string, opts store.PutOptions) error {
		body := []byte("from the test: " + key)
		opts.CRC32C = store.CRC32C(body)
		_, err := st.Put(t.Context(), key, bytes.NewReader(body), int64(len(body)), opts)
		return err
	}
	put(t, direct, "exists", []byte("there before"))
	put(t, direct, "replace", []byte("there before"))
	replaceTag, err := direct.Head(t.Context(), "replace")
	if err != nil {
		t.Fatal(err)
	}
	put(t, direct, "changed", []byte("first"))
	oldTag, err := direct.Head(t.Context(), "changed")
	if err != nil {
		t.Fatal(err)
	}
	put(t, direct, "changed", []byte("second"))

	for _, c := range []struct {
		key  string
		opts store.PutOptions
		lost bool
	}{
		{"create", store.PutOptions{IfNoneMatch: true}, false},
		{"exists", store.PutOptions{IfNoneMatch: true}, true},
		{"replace", store.PutOptions{IfMatch: replaceTag.ETag}, false},
		{"changed", store.PutOptions{IfMatch: oldTag.ETag}, true},
	} {
		err := putOpts(c.key, c.opts)
		switch {
		case c.lost && !errors.Is(err, store.ErrPreconditionFailed):
			t.Errorf("%s: %v, want a lost race", c.key, err)
		case c.lost && !strings.Contains(err.Error(), "found after 429"):
			t.Errorf("%s: %v does not say it was found after a 429", c.key, err)
		case !c.lost && err != nil:
			t.Errorf("%s: %v, want it written", c.key, err)
		case !c.lost:
			if got := string(storetest.MustGet(t, direct, c.key, 0, -1)); got != "from the test: "+c.key {
				t.Errorf("%s holds %q", c.key, got)
			}
		}
		var seq []string
		for _, r := range f.px.Requests() {
			if r.Key == c.key {
				seq = append(seq, fmt.Sprint(r.Op, " ", r.Status))
			}
		}
		// Behind the shared server's R2 rules proxy a PUT sent again
		// within a second of the key's last write may meet a 429 more.
		want := []string{"PutObject 429", "HeadObject 200"}
		switch {
		case c.key == "create":
			want = []string{"PutObject 429", "HeadObject 404", "PutObject 200"}
		case !c.lost:
			want = append(want, "PutObject 200")
		}
		if !s3test.R2Rules() && !slices.Equal(seq, want) || len(seq) < len(want) || !slices.Equal(seq[:2], want[:2]) || seq[len(seq)-1] != want[len(want)-1] {
			t.Errorf("%s: requests %v, want %v", c.key, seq, want)
		}
	}
}
