package peer

import (
	"context"
	"maps"
	"net/http"
	"net/url"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/ferrylabs/ferry/internal/ctxtime"
)

// ownedRange is a range this node fetches from the bucket.
type ownedRange struct {
	key      string
	i        int64
	off, len int64 // len includes one byte past a last range: see fetchRange
	held     *heldRange
}

// expectOwned registers in the spool every range a assigns to this node,
// in the order of its plan.
func (n *Node) expectOwned(a *assignment, p *plan, sp *spool) []ownedRange {
	var out []ownedRange
	for _, f := range p.Files {
		if f.Size == 0 || !a.shared(f.Key) {
			// Nothing to share: its restore reads it from the bucket,
			// without the spool's extra copy.
			continue
		}
		nc := chunks(f.Size, a.chunk)
		for i := range nc {
			if a.owner(f.Key, i) != n.self {
				continue
			}
			off := i * a.chunk
			l := min(a.chunk, f.Size-off)
			if i == nc-1 {
				// One byte more than the object should hold, as restore
				// asks: an object longer than its manifest shows up.
				l++
			}
			out = append(out, ownedRange{key: f.Key, i: i, off: off, len: l, held: sp.expect(f.Key, i, l)})
		}
	}
	return out
}

// fetchOwned fetches the owned ranges from the bucket into the spool,
// Concurrency at a time, in plan order. A range that cannot be fetched is
// marked failed: whoever needs it goes to the bucket.
func (n *Node) fetchOwned(owned []ownedRange) {
	var g errgroup.Group
	g.SetLimit(n.cfg.Concurrency)
	for _, r := range owned {
		g.Go(func() error {
			n.fetchRange(n.ctx, r)
			return nil
		})
	}
	_ = g.Wait()
}

func (n *Node) fetchRange(ctx context.Context, r ownedRange) {
	sp := n.currentSpool()
	var err error
	for try := range 3 {
		if try > 0 && ctxtime.Sleep(ctx, time.Duration(try)*200*time.Millisecond) != nil {
			break
		}
		body, gerr := n.cfg.Bucket.Get(ctx, r.key, r.off, r.len)
		if gerr != nil {
			err = gerr
			continue
		}
		err = sp.fill(r.held, countReader{body, &n.stats.bucket}, r.len)
		body.Close()
		if err != nil {
			n.log.Debug("fetching an owned range failed", zap.String("key", r.key), zap.Int64("range", r.i), zap.Error(err))
		}
		return // a failed fill is final: its waiters go to the bucket
	}
	n.log.Debug("cannot fetch an owned range", zap.String("key", r.key), zap.Int64("range", r.i), zap.Error(err))
	sp.failed(r.held, err)
}

// Finish tells the peers this node is done, then keeps serving until every
// peer that needs a range this node owns has said it is done too, has been
// dropped, or Linger has passed.
func (n *Node) Finish(ctx context.Context) {
	n.mu.Lock()
	a := n.assign
	n.mu.Unlock()
	if a == nil {
		return
	}
	n.sendDone(ctx)
	served := map[string]bool{}
	for _, p := range n.peersServed(a) {
		served[p] = true
	}
	lingerEnd := time.Now().Add(n.cfg.Linger)
	for {
		must, maybe, signal, showUpEnd := n.unfinished(served)
		now := time.Now()
		if must == 0 && (maybe == 0 || !now.Before(showUpEnd)) {
			return
		}
		if !now.Before(lingerEnd) {
			n.log.Warn("stopped serving peers that are not done", zap.Int("peers", must), zap.Duration("linger", n.cfg.Linger))
			return
		}
		next := lingerEnd
		if must == 0 {
			next = showUpEnd
		}
		t := time.NewTimer(next.Sub(now))
		select {
		case <-signal:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
		t.Stop()
	}
}

// sendDone tells every peer that this node is done, best effort.
func (n *Node) sendDone(ctx context.Context) {
	q := url.Values{"from": {n.self}}
	var g errgroup.Group
	for i, addr := range n.cfg.Peers {
		if i == n.cfg.Self {
			continue
		}
		g.Go(func() error {
			ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			if resp, err := n.do(ctx, http.MethodPost, addr, "/v1/done", q); err == nil {
				resp.Body.Close()
			}
			return nil
		})
	}
	_ = g.Wait()
}

// unfinished counts the peers Finish still waits for. maybe: those that
// have not read this node's plan yet and may still be asking for it, until
// showUpEnd (Wait after this node joined: leaving earlier would make them
// wait that long for nothing). must, if this node serves anything: those
// that read its plan and need its ranges, or that it knows nothing of,
// until they are done or dropped (at most Linger).
func (n *Node) unfinished(served map[string]bool) (must, maybe int, signal chan struct{}, showUpEnd time.Time) {
	n.mu.Lock()
	defer n.mu.Unlock()
	serves := len(n.servedKeys) > 0
	for i, p := range n.cfg.Peers {
		switch {
		case i == n.cfg.Self || n.doneFrom[p] || n.dropped[p] != "" || n.seeds[p]:
		case !n.planRead[p]:
			maybe++
		case serves && (served[p] || !n.inView[p]):
			must++
		}
	}
	return must, maybe, n.changed, n.joinedAt.Add(n.cfg.Wait)
}

// peersServed returns the peers that need an object of which this node
// owns a range.
func (n *Node) peersServed(a *assignment) []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	seen := map[string]bool{}
	var out []string
	for key := range n.servedKeys {
		for _, addr := range a.needers[key] {
			if addr != n.self && !seen[addr] {
				seen[addr] = true
				out = append(out, addr)
			}
		}
	}
	return out
}

// Close stops serving (at once) and fetching and removes the spool.
func (n *Node) Close() error {
	n.cancel()
	// Not Shutdown: Finish has served whoever needed this node, and
	// Shutdown waits 5 s for a connection a peer's client dialed but never
	// used (net/http keeps new connections until then).
	err := n.srv.Close()
	n.wg.Wait()
	if sp := n.currentSpool(); sp != nil {
		_ = sp.close()
	}
	n.mu.Lock()
	for _, d := range n.roots {
		d.Close()
	}
	n.mu.Unlock()
	return err
}

// Stats returns the node's counts so far.
func (n *Node) Stats() Stats {
	n.mu.Lock()
	defer n.mu.Unlock()
	s := Stats{BucketBytes: n.stats.bucket.Load(), PeerBytes: n.stats.peers.Load(), LocalBytes: n.stats.local.Load(),
		ServedBytes: n.stats.served.Load(), Fallbacks: n.stats.fallbacks.Load()}
	if n.assign != nil {
		joined := map[string]bool{}
		for _, m := range []map[string][]string{n.assign.needers, n.assign.holders} {
			for _, ns := range m {
				for _, a := range ns {
					joined[a] = a != n.self
				}
			}
		}
		for _, j := range joined {
			if j {
				s.Joined++
			}
		}
	}
	if len(n.dropped) > 0 {
		s.Dropped = maps.Clone(n.dropped)
	}
	return s
}
