package storecheck_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/internal/storecheck"
)

var target = storecheck.Target{Endpoint: "http://127.0.0.1:1", Bucket: "b", Prefix: "run"}

// ignoring is a store that drops the conditions of the writes whose kind
// it is told to ignore, as a store that does not implement them would.
type ignoring struct {
	store.Store
	noneMatch, match bool
	// throttle answers the first n conditional writes 429.
	throttle int
}

type status429 struct{}

func (status429) Error() string       { return "429 Too Many Requests" }
func (status429) HTTPStatusCode() int { return 429 }

func (s *ignoring) Put(ctx context.Context, key string, body io.ReadSeeker, size int64, opts store.PutOptions) (store.ObjectInfo, error) {
	if (opts.IfNoneMatch || opts.IfMatch != "") && s.throttle > 0 {
		s.throttle--
		// As the S3 store answers a 429 whose key already fails the
		// precondition: a guess, not the server's answer.
		return store.ObjectInfo{}, fmt.Errorf("put %s: %w (found after 429): %w", key, store.ErrPreconditionFailed, status429{})
	}
	if s.noneMatch {
		opts.IfNoneMatch = false
	}
	if s.match {
		opts.IfMatch = ""
	}
	return s.Store.Put(ctx, key, body, size, opts)
}

func keys(t *testing.T, st store.Store) []string {
	t.Helper()
	var out []string
	if err := st.List(t.Context(), "", "", 0, func(o store.ObjectInfo) error {
		out = append(out, o.Key)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestConditionalWrites(t *testing.T) {
	for _, tc := range []struct {
		name             string
		noneMatch, match bool
		want             string // in the error; "" for none
	}{
		{name: "enforced"},
		{name: "ignores If-None-Match", noneMatch: true, want: "ignores If-None-Match: *"},
		{name: "ignores If-Match", match: true, want: "ignores If-Match"},
		{name: "ignores both", noneMatch: true, match: true, want: "ignores If-None-Match: *"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := store.NewMemStore()
			st := &ignoring{Store: mem, noneMatch: tc.noneMatch, match: tc.match}
			err := storecheck.ConditionalWrites(t.Context(), st, target)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("a store enforcing conditional writes failed the check: %v", err)
			case tc.want != "" && !errors.Is(err, storecheck.ErrNotEnforced):
				t.Fatalf("got %v, want ErrNotEnforced", err)
			case tc.want != "" && (!strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), `bucket "b" at http://127.0.0.1:1`)):
				t.Errorf("error %q: want it to name the store and %q", err, tc.want)
			}
			if k := keys(t, mem); len(k) != 0 {
				t.Errorf("the check left %q in the bucket", k)
			}
		})
	}
}

// TestConditionalWritesThrottled: a refusal the S3 store guessed after a
// 429 proves nothing; the check asks again and takes the store's answer.
func TestConditionalWritesThrottled(t *testing.T) {
	mem := store.NewMemStore()
	// The check's first write, a create, goes through; its second, the
	// create that must be refused, meets one 429.
	st := &throttledAfterFirst{ignoring: ignoring{Store: mem, noneMatch: true}, n: 1}
	start := time.Now()
	err := storecheck.ConditionalWrites(t.Context(), st, target)
	if !errors.Is(err, storecheck.ErrNotEnforced) {
		t.Fatalf("a store ignoring If-None-Match behind one 429 passed the check (%v)", err)
	}
	if time.Since(start) < time.Second {
		t.Errorf("asked again after %v, want a pause of about a second after a 429", time.Since(start))
	}
}

// throttledAfterFirst lets the first conditional write through, then
// answers the next n with a guessed 412 after a 429.
type throttledAfterFirst struct {
	ignoring
	n    int
	seen int
}

func (s *throttledAfterFirst) Put(ctx context.Context, key string, body io.ReadSeeker, size int64, opts store.PutOptions) (store.ObjectInfo, error) {
	if opts.IfNoneMatch || opts.IfMatch != "" {
		s.seen++
		if s.seen == 2 {
			s.throttle = s.n
		}
	}
	return s.ignoring.Put(ctx, key, body, size, opts)
}

// TestConditionalWritesOwnFirstWrite: the check's first create-only PUT
// lands but its answer is lost, and the attempt sent again meets 412 (the
// object it created itself). The check reads the object back, finds its own
// bytes, goes on, passes and deletes its scratch objects. Other bytes under
// the key would still fail it.
func TestConditionalWritesOwnFirstWrite(t *testing.T) {
	for _, tc := range []struct {
		name   string
		other  bool
		always bool
		wantOK bool
	}{
		// The 412 of a retried PUT whose first answer was lost: the
		// object read back is ours, the check goes on with it.
		{name: "own bytes", wantOK: true},
		// A 412 ferry cannot confirm as its own (read back as other
		// bytes, as through a link that failed the read): no one else
		// knows the key, so it says nothing of the store; a fresh key.
		{name: "other bytes", other: true, wantOK: true},
		// A store that answers 412 to every new key: its answer, after
		// three fresh keys.
		{name: "every new key", other: true, always: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := store.NewMemStore()
			st := &lostAnswer{Store: mem, other: tc.other, always: tc.always}
			err := storecheck.ConditionalWrites(t.Context(), st, target)
			if tc.wantOK && err != nil {
				t.Fatalf("a create-only PUT whose answer was lost failed the check: %v", err)
			}
			if !tc.wantOK && (err == nil || !errors.Is(err, store.ErrPreconditionFailed)) {
				t.Fatalf("a store refusing every create-only PUT of a new key: %v, want its 412", err)
			}
			if tc.always && st.refusals != 3 {
				t.Errorf("%d create-only PUTs of new keys refused, want 3 fresh keys tried", st.refusals)
			}
			if k := keys(t, mem); len(k) != 0 {
				t.Errorf("the check left %q in the bucket", k)
			}
		})
	}
}

// lostAnswer stores the first create-only PUT (or other bytes, with other)
// and answers it 412, as a retry of a PUT whose first answer was lost is
// answered; with always, every create-only PUT.
type lostAnswer struct {
	store.Store
	other, always bool
	done          bool
	refusals      int
}

func (s *lostAnswer) Put(ctx context.Context, key string, body io.ReadSeeker, size int64, opts store.PutOptions) (store.ObjectInfo, error) {
	if !opts.IfNoneMatch || (s.done && !s.always) {
		return s.Store.Put(ctx, key, body, size, opts)
	}
	s.done = true
	s.refusals++
	if s.other {
		body, size, opts.CRC32C = strings.NewReader("another writer's bytes"), 22, ""
	}
	if _, err := s.Store.Put(ctx, key, body, size, opts); err != nil {
		return store.ObjectInfo{}, err
	}
	return store.ObjectInfo{}, fmt.Errorf("put %s: %w", key, store.ErrPreconditionFailed)
}

func TestCache(t *testing.T) {
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	c := storecheck.Cache{Dir: t.TempDir(), Now: func() time.Time { return now }}
	mem := store.NewMemStore()
	counting := &countingStore{Store: mem}
	cached, err := storecheck.Ensure(t.Context(), counting, target, c, nil)
	if err != nil || cached {
		t.Fatalf("first Ensure: cached %v, %v", cached, err)
	}
	first := counting.puts
	if first == 0 {
		t.Fatal("the first Ensure wrote nothing: it did not check")
	}
	if cached, err = storecheck.Ensure(t.Context(), counting, target, c, nil); err != nil || !cached || counting.puts != first {
		t.Fatalf("second Ensure: cached %v, %v, %d more writes; want the cache to answer", cached, err, counting.puts-first)
	}
	other := target
	other.Bucket = "other"
	if c.Proven(other) {
		t.Error("a proof for one bucket answered for another")
	}
	other = target
	other.Endpoint = "https://elsewhere"
	if c.Proven(other) {
		t.Error("a proof for one endpoint answered for another")
	}
	now = now.Add(storecheck.MaxAge + time.Minute)
	if c.Proven(target) {
		t.Error("a proof older than MaxAge was trusted")
	}
	now = now.Add(-storecheck.MaxAge)
	if err := c.Forget(target); err != nil || c.Proven(target) {
		t.Errorf("Forget: %v; still proven %v", err, c.Proven(target))
	}

	// A store that ignores the conditions is never recorded.
	bad := &ignoring{Store: store.NewMemStore(), noneMatch: true}
	if _, err := storecheck.Ensure(t.Context(), bad, target, c, nil); !errors.Is(err, storecheck.ErrNotEnforced) {
		t.Fatalf("Ensure on an ignoring store: %v", err)
	}
	if c.Proven(target) {
		t.Error("a failed check was recorded as a proof")
	}
}

type countingStore struct {
	store.Store
	puts int
}

func (s *countingStore) Put(ctx context.Context, key string, body io.ReadSeeker, size int64, opts store.PutOptions) (store.ObjectInfo, error) {
	s.puts++
	return s.Store.Put(ctx, key, body, size, opts)
}

// noDelete refuses every DELETE, as credentials allowed to write only.
type noDelete struct{ store.Store }

func (noDelete) Delete(context.Context, string) error { return errors.New("403 AccessDenied") }

// TestConditionalWritesWithoutDelete: a store that passes but will not
// delete the scratch objects still passes (a push needs no DELETE), and the
// keys left are named.
func TestConditionalWritesWithoutDelete(t *testing.T) {
	mem := store.NewMemStore()
	err := storecheck.ConditionalWrites(t.Context(), noDelete{mem}, target)
	var left *storecheck.LeftError
	if !errors.As(err, &left) || len(left.Keys) != 2 || !strings.Contains(err.Error(), "could not be deleted") {
		t.Fatalf("got %v, want a LeftError naming the 2 scratch keys", err)
	}
	if k := keys(t, mem); len(k) != 2 || k[0] != left.Keys[0] && k[0] != left.Keys[1] {
		t.Errorf("left in the store %q, named %q", k, left.Keys)
	}
	c := storecheck.Cache{Dir: t.TempDir()}
	if _, err := storecheck.Ensure(t.Context(), noDelete{store.NewMemStore()}, target, c, nil); err != nil || !c.Proven(target) {
		t.Errorf("Ensure without DELETE: %v, proven %v; want the proof recorded", err, c.Proven(target))
	}
}

// noBucket refuses every PUT as a missing bucket does, and counts what
// else is asked of it.
type noBucket struct {
	store.Store
	deletes int
}

func (*noBucket) Put(context.Context, string, io.ReadSeeker, int64, store.PutOptions) (store.ObjectInfo, error) {
	return store.ObjectInfo{}, fmt.Errorf("put: %w", store.ErrNoBucket)
}

func (s *noBucket) Delete(context.Context, string) error { s.deletes++; return nil }

// TestConditionalWritesMissingBucket: a PUT refused outright wrote nothing,
// so nothing is deleted: the check stops at its first request.
func TestConditionalWritesMissingBucket(t *testing.T) {
	st := &noBucket{Store: store.NewMemStore()}
	err := storecheck.ConditionalWrites(t.Context(), st, target)
	if !errors.Is(err, store.ErrNoBucket) || errors.Is(err, storecheck.ErrNotEnforced) {
		t.Fatalf("got %v, want the missing bucket", err)
	}
	if st.deletes != 0 {
		t.Errorf("%d DELETEs after a refused PUT, want none", st.deletes)
	}
}
