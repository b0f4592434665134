package s3proxy

import (
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func rateProxy(t *testing.T, interval time.Duration) *Proxy {
	t.Helper()
	p, err := New("http://127.0.0.1:1", Config{R2Rules: true, R2KeyWriteInterval: interval})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func writeTo(op, bucket, key string) *exchange {
	return &exchange{op: op, tg: target{bucket: bucket, key: key, object: true}}
}

// TestKeyWriteSettle: a write the server answered 2xx or 412 holds the key
// for the interval; one it answered otherwise is forgotten at once.
func TestKeyWriteSettle(t *testing.T) {
	p := rateProxy(t, time.Hour)
	for _, c := range []struct {
		status int
		holds  bool
	}{{200, true}, {204, true}, {412, true}, {400, false}, {404, false}, {500, false}, {0, false}} {
		key := fmt.Sprint("k", c.status)
		s, v := p.admitWrite(writeTo(OpPutObject, "b", key))
		if s == nil || v != nil {
			t.Fatalf("first write to %s: slot %v, violation %v", key, s, v)
		}
		if _, v := p.admitWrite(writeTo(OpPutObject, "b", key)); v == nil || v.status != http.StatusTooManyRequests {
			t.Errorf("a write to %s while one is in flight: %v, want 429", key, v)
		}
		p.settleWrite(s, c.status)
		s2, v := p.admitWrite(writeTo(OpCompleteMultipartUpload, "b", key))
		if held := v != nil; held != c.holds {
			t.Errorf("after a write answered %d: held %v, want %v (%v)", c.status, held, c.holds, v)
		}
		p.settleWrite(s2, 0)
	}
	// Reads, deletes and other buckets are not limited.
	for _, ex := range []*exchange{writeTo(OpGetObject, "b", "k200"), writeTo(OpHeadObject, "b", "k200"),
		writeTo(OpDeleteObject, "b", "k200"), writeTo(OpUploadPart, "b", "k200"), writeTo(OpPutObject, "other", "k200")} {
		s, v := p.admitWrite(ex)
		if v != nil {
			t.Errorf("%s /%s/%s refused: %v", ex.op, ex.tg.bucket, ex.tg.key, v)
		}
		p.settleWrite(s, 200)
	}
	if s, v := p.admitWrite(writeTo(OpCopyObject, "b", "k200")); v == nil {
		t.Error("CopyObject to a key just written was let through")
		p.settleWrite(s, 200)
	}
}

// TestKeyWritesSwept: keys whose last write is older than the interval are
// forgotten, so memory holds only recent ones.
func TestKeyWritesSwept(t *testing.T) {
	const interval = 20 * time.Millisecond
	p := rateProxy(t, interval)
	for i := range 1000 {
		s, _ := p.admitWrite(writeTo(OpPutObject, "b", fmt.Sprint("k", i)))
		p.settleWrite(s, 200)
	}
	inFlight, _ := p.admitWrite(writeTo(OpPutObject, "b", "slow"))
	time.Sleep(2 * interval)
	s, v := p.admitWrite(writeTo(OpPutObject, "b", "k0"))
	if v != nil {
		t.Fatalf("a write after the interval: %v", v)
	}
	p.settleWrite(s, 200)
	p.mu.Lock()
	n := len(p.keyWrites)
	p.mu.Unlock()
	if n != 2 { // k0 again, and the write still in flight
		t.Errorf("%d keys remembered after the sweep, want 2", n)
	}
	if _, v := p.admitWrite(writeTo(OpPutObject, "b", "slow")); v == nil {
		t.Error("a key with a write in flight was forgotten")
	}
	p.settleWrite(inFlight, 200)
}

// TestKeyWriteConcurrent: writers racing for one key get one slot at a
// time, however many there are.
func TestKeyWriteConcurrent(t *testing.T) {
	p := rateProxy(t, time.Microsecond)
	var inside, most, admitted atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 500 {
				s, v := p.admitWrite(writeTo(OpPutObject, "b", "k"))
				if v != nil {
					continue
				}
				admitted.Add(1)
				n := inside.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				inside.Add(-1)
				p.settleWrite(s, 200)
			}
		}()
	}
	wg.Wait()
	if most.Load() != 1 || admitted.Load() == 0 {
		t.Errorf("%d writes let through, at most %d at once; want some, one at a time", admitted.Load(), most.Load())
	}
}
