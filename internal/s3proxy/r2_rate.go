package s3proxy

import (
	"net/http"
	"time"
)

// DefaultR2KeyWriteInterval is the least time R2 rules mode lets pass
// between two writes to one key when Config.R2KeyWriteInterval is zero:
// R2 allows about one write a second to the same key [rate].
const DefaultR2KeyWriteInterval = time.Second

// The per-key write rate [rate]: R2 answers a write to a key that had a
// write less than a second before, or has one in flight, with 429
// TooManyRequests. A correct client meets it whenever several writers race
// for one key (nodes claiming a step's merge with create-only PUTs), so it
// is an answer to handle, not a request to refuse: the proxy answers 429,
// records the request as Throttled and not among the Violations that fail
// a test binary.
//
// Writes are PutObject, CopyObject (to its destination key) and
// CompleteMultipartUpload, the operations that create or replace the
// object at a key. A write counts when the server answers it 2xx, or 412
// Precondition Failed (a conditional write that lost is still a write
// attempt at that key for R2 [cond]); one answered otherwise (400, 404,
// 5xx, no answer) is forgotten. A request the proxy answers 429 is not a
// write: it never reached the store. DeleteObject is not counted: R2's
// documents name writes only, bill deletes in no class, and say nothing of
// deletes in the limit; we have not measured it.
const (
	r2RateCode    = "TooManyRequests"
	r2RateMessage = "Reduce your concurrent request rate for the same object."
)

// keyWrite is what the rate rule remembers of the last write to a key.
type keyWrite struct {
	at       time.Time // when it was let through
	prev     time.Time // the write before it, restored if it does not count
	inFlight bool
}

// writeSlot is a write let through to the server, to settle with its answer.
type writeSlot struct {
	name string
	w    *keyWrite
}

// isKeyWrite reports whether op writes the object at the request's key.
func isKeyWrite(op string) bool {
	switch op {
	case OpPutObject, OpCopyObject, OpCompleteMultipartUpload:
		return true
	}
	return false
}

// admitWrite applies the per-key write rate to a request about to be
// forwarded. It returns the slot to settle once the server has answered,
// or the violation to answer with; both nil when the rule does not apply.
func (p *Proxy) admitWrite(ex *exchange) (*writeSlot, *violation) {
	if !p.r2 || p.keyInterval <= 0 || !isKeyWrite(ex.op) || !ex.tg.object {
		return nil, nil
	}
	name := ex.tg.bucket + "/" + ex.tg.key
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sweepKeyWrites(now)
	w := p.keyWrites[name]
	switch {
	case w != nil && w.inFlight:
		return nil, refusal(http.StatusTooManyRequests, r2RateCode, r2RateMessage,
			"%s to a key with a write in flight since %v", ex.op, now.Sub(w.at).Round(time.Millisecond))
	case w != nil && now.Sub(w.at) < p.keyInterval:
		return nil, refusal(http.StatusTooManyRequests, r2RateCode, r2RateMessage,
			"%s %v after the last write to the key; R2 allows one per %v",
			ex.op, now.Sub(w.at).Round(time.Millisecond), p.keyInterval)
	}
	if w == nil {
		w = &keyWrite{}
		p.keyWrites[name] = w
	}
	w.prev, w.at, w.inFlight = w.at, now, true
	return &writeSlot{name: name, w: w}, nil
}

// settleWrite ends a write let through: status is the server's answer, 0
// for none. A write the server did not carry out or refuse for its
// precondition is forgotten.
func (p *Proxy) settleWrite(s *writeSlot, status int) {
	if s == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	s.w.inFlight = false
	if (status >= 200 && status < 300) || status == http.StatusPreconditionFailed {
		return
	}
	// No other write was let through meanwhile (this one was in flight),
	// so the key's last write is the one before.
	s.w.at = s.w.prev
	if s.w.at.IsZero() && p.keyWrites[s.name] == s.w {
		delete(p.keyWrites, s.name)
	}
}

// sweepKeyWrites forgets keys whose last write is older than the interval,
// at most once per interval, so that memory holds only the keys written in
// the last two intervals (and those with a write in flight). Call with
// p.mu held.
func (p *Proxy) sweepKeyWrites(now time.Time) {
	if now.Sub(p.keySweep) < p.keyInterval {
		return
	}
	p.keySweep = now
	for name, w := range p.keyWrites {
		if !w.inFlight && now.Sub(w.at) >= p.keyInterval {
			delete(p.keyWrites, name)
		}
	}
}

// throttle answers a write with R2's 429 for the per-key write rate and
// records it among the throttled requests, not the violations.
func (p *Proxy) throttle(ex *exchange, v *violation) {
	drainBody(ex)
	p.mu.Lock()
	ex.rec.Throttled = v.detail
	p.throttledN++
	if len(p.throttled) < p.maxRecords {
		p.throttled = append(p.throttled, ex.rec)
	}
	p.mu.Unlock()
	p.logf("s3proxy: R2 rules answered 429 to %s %s /%s/%s: %s", ex.op, ex.r.Method, ex.tg.bucket, ex.tg.key, v.detail)
	p.writeError(ex, v.status, v.code, v.message)
}

// Throttled returns the requests the R2 rules answered 429 for the per-key
// write rate since the proxy started (at most Config.MaxRecords of them;
// Reset does not clear them), and how many there were in all.
func (p *Proxy) Throttled() ([]Request, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]Request, len(p.throttled))
	for i, r := range p.throttled {
		out[i] = *r
	}
	return out, p.throttledN
}
