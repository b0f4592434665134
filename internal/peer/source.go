package peer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/restore"
)

// The restore reads through source and tells it which keys failed their
// hash: both seams are checked here, so a renamed method fails the build
// instead of silently disabling the fallback to the bucket.
var (
	_ store.Store        = (*source)(nil)
	_ restore.Distruster = (*source)(nil)
)

// source is the store a cooperative restore reads from: Get takes each
// range from its owner (this node's spool, or a peer) and from the bucket
// when the owner does not serve it; every other call goes to the bucket.
type source struct {
	store.Store
	n *Node
}

// segment is the part of a Get that falls in one range of the object.
type segment struct {
	i    int64 // range index
	skip int64 // bytes into the range
	n    int64 // bytes wanted
	off  int64 // offset in the object
	last bool  // the object's last range: fewer bytes are its end, not a fault
}

// split cuts [off, end) of an object of size bytes into per-range
// segments; the last range reaches one byte past the object.
func split(off, end, size, chunk int64) []segment {
	nc := chunks(size, chunk)
	var out []segment
	for o := off; o < end; {
		i := min(o/chunk, nc-1)
		ce := (i + 1) * chunk
		if i == nc-1 {
			ce = size + 1
		}
		e := min(end, ce)
		out = append(out, segment{i: i, skip: o - i*chunk, n: e - o, off: o, last: i == nc-1})
		o = e
	}
	return out
}

// Get implements store.Store.
func (s *source) Get(ctx context.Context, key string, off, length int64) (io.ReadCloser, error) {
	n := s.n
	n.mu.Lock()
	a, size, distrusted := n.assign, n.sizes[key], n.distrusted[key]
	_, known := n.sizes[key]
	_, held := n.held[key]
	n.mu.Unlock()
	// A file this node holds is fetched only when its copy turned out
	// wrong: from the bucket.
	known = known && !held
	end := size + 1
	if length >= 0 {
		end = min(off+length, size+1)
	}
	if a == nil || !known {
		return s.Store.Get(ctx, key, off, length) // not the restore's data: its manifest, say
	}
	if distrusted || size == 0 || !a.shared(key) || off < 0 || off >= end {
		rc, err := s.Store.Get(ctx, key, off, length)
		if err != nil {
			return nil, err
		}
		return readCloser{countReader{rc, &n.stats.bucket}, rc}, nil
	}
	return &body{ctx: ctx, s: s, key: key, size: size, segs: split(off, end, size, a.chunk)}, nil
}

// Distrust makes every later Get of key go to the bucket and drops the
// peers that sent bytes of it: restore calls it when the object's bytes
// failed the manifest's BLAKE3.
func (s *source) Distrust(key string) {
	n := s.n
	n.mu.Lock()
	n.distrusted[key] = true
	var bad []string
	for p := range n.servedBy[key] {
		if n.dropped[p] == "" {
			n.dropped[p] = "sent bytes of " + key + " that failed the manifest's BLAKE3"
			bad = append(bad, p)
		}
	}
	n.mu.Unlock()
	n.log.Warn("an object's bytes failed its hash; fetching it from the bucket", zap.String("key", key), zap.Strings("dropped_peers", bad))
}

// open opens one segment: from this node's spool if it owns the range,
// else from the owner, else (the owner did not serve it) from the bucket.
// It returns the peer the bytes come from, "" for none.
func (s *source) open(ctx context.Context, key string, seg segment) (io.ReadCloser, string, error) {
	n := s.n
	n.mu.Lock()
	owner := n.assign.owner(key, seg.i)
	dropped := n.dropped[owner] != ""
	sp := n.spool
	n.mu.Unlock()
	switch {
	case owner == n.self:
		h, err := sp.wait(ctx, key, seg.i, 365*24*time.Hour) // the fetch ends, one way or the other
		if err == nil {
			have := max(min(seg.n, h.n-seg.skip), 0)
			return io.NopCloser(countReader{sp.section(h, seg.skip, have), &n.stats.local}), "", nil
		}
		if ctx.Err() != nil {
			return nil, "", ctx.Err()
		}
	case owner != "" && !dropped && n.trusted(owner):
		// Never the byte past the object from a peer: whether the stored
		// object is longer than its manifest says is the bucket's to tell
		// (the owner's own restore checks it); a peer could only fail the
		// restore with it.
		if seg.last {
			seg.n = min(seg.n, s.n.sizeOf(key)-seg.off)
		}
		rc, err := s.fromPeer(ctx, owner, key, seg)
		if err == nil {
			return rc, owner, nil
		}
		if ctx.Err() != nil {
			return nil, "", ctx.Err()
		}
	}
	n.stats.fallbacks.Add(1)
	rc, err := s.Store.Get(ctx, key, seg.off, seg.n)
	if err != nil {
		return nil, "", err
	}
	return readCloser{countReader{rc, &n.stats.bucket}, rc}, "", nil
}

// fromPeer asks owner for a segment. A peer that cannot be reached or
// answers anything but the bytes or "not held" is dropped.
func (s *source) fromPeer(ctx context.Context, owner, key string, seg segment) (io.ReadCloser, error) {
	n := s.n
	q := url.Values{"key": {key}, "i": {strconv.FormatInt(seg.i, 10)}, "skip": {strconv.FormatInt(seg.skip, 10)},
		"n": {strconv.FormatInt(seg.n, 10)}, "chunk": {strconv.FormatInt(n.assign.chunk, 10)}}
	resp, err := n.do(ctx, http.MethodGet, owner, "/v1/range", q)
	if err != nil {
		n.drop(owner, fmt.Sprintf("asked for a range: %v", err))
		return nil, err
	}
	switch resp.StatusCode {
	case http.StatusOK:
		n.mu.Lock()
		if n.servedBy[key] == nil {
			n.servedBy[key] = map[string]bool{}
		}
		n.servedBy[key][owner] = true
		n.mu.Unlock()
		return resp.Body, nil
	case http.StatusNotFound:
		resp.Body.Close()
		return nil, errNotHeld
	default:
		resp.Body.Close()
		n.drop(owner, "answered "+resp.Status)
		return nil, errors.New(resp.Status)
	}
}

func (n *Node) sizeOf(key string) int64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.sizes[key]
}

// drop stops asking peer for anything.
func (n *Node) drop(peer, why string) {
	n.mu.Lock()
	first := n.dropped[peer] == ""
	if first {
		n.dropped[peer] = why
	}
	n.mu.Unlock()
	if first {
		n.log.Warn("dropped a peer; its ranges come from the bucket", zap.String("peer", peer), zap.String("why", why))
	}
}

// body reads a Get's segments in turn.
type body struct {
	ctx  context.Context
	s    *source
	key  string
	size int64
	segs []segment
	cur  io.ReadCloser
	peer string // where cur comes from
	got  int64  // bytes of the current segment read
}

func (b *body) Read(p []byte) (int, error) {
	for {
		if b.cur == nil {
			if len(b.segs) == 0 {
				return 0, io.EOF
			}
			rc, peer, err := b.s.open(b.ctx, b.key, b.segs[0])
			if err != nil {
				return 0, err
			}
			b.cur, b.peer, b.got = rc, peer, 0
		}
		seg := b.segs[0]
		limit := seg.n
		if b.peer != "" && seg.last {
			limit = min(limit, b.size-seg.off) // as asked of the peer
		}
		k, err := b.cur.Read(p[:min(int64(len(p)), limit-b.got)])
		b.got += int64(k)
		if b.peer != "" {
			b.s.n.stats.peers.Add(int64(k))
		}
		switch {
		case err == nil && b.got < limit:
			return k, nil
		case err == nil || errors.Is(err, io.EOF):
			short := b.got < limit
			b.closeCur()
			b.segs = b.segs[1:]
			if short && (b.peer != "" || !seg.last) {
				b.fault("ended a range early")
				return k, io.ErrUnexpectedEOF
			}
			if short || seg.last {
				b.segs = nil // the object ends here
			}
			if k > 0 {
				return k, nil
			}
		default:
			b.fault(fmt.Sprintf("failed mid-range: %v", err))
			b.closeCur()
			return k, err
		}
	}
}

// fault drops the current segment's peer, if it came from one.
func (b *body) fault(why string) {
	if b.peer != "" && b.ctx.Err() == nil {
		b.s.n.drop(b.peer, why)
	}
}

func (b *body) closeCur() {
	if b.cur != nil {
		b.cur.Close()
		b.cur = nil
	}
}

// Close ends the read. A peer's range cut before its end (the restore's
// low-speed guard) drops that peer.
func (b *body) Close() error {
	if b.cur != nil && b.got < min(b.segs[0].n, b.size-b.segs[0].off) {
		b.fault("too slow: the restore cut its range")
	}
	b.closeCur()
	return nil
}

type countReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c countReader) Read(p []byte) (int, error) {
	k, err := c.r.Read(p)
	c.n.Add(int64(k))
	return k, err
}

type readCloser struct {
	io.Reader
	io.Closer
}
