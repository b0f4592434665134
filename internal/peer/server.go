package peer

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/ferrylabs/ferry/internal/ratelimit"
)

// handler serves this node's plan, the ranges it holds and done notices,
// to requests signed with the job's key only.
func (n *Node) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/plan", n.servePlan)
	mux.HandleFunc("GET /v1/range", n.serveRange)
	mux.HandleFunc("POST /v1/done", n.serveDone)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := verify(r, n.cfg.Key, time.Now(), n.isSelf, &n.nonces); err != nil {
			n.log.Debug("refused a peer request", zap.String("remote", r.RemoteAddr), zap.String("path", r.URL.Path), zap.Error(err))
			http.Error(w, errUnauthorized.Error(), http.StatusUnauthorized)
			return
		}
		introduce(r)
		clearReadDeadline(w)
		mux.ServeHTTP(w, r)
	})
}

// servePlan answers with this node's plan, 503 until it has one, and
// notes who read it: a peer that knows this node's plan may ask it for
// ranges, so Finish waits for it.
func (n *Node) servePlan(w http.ResponseWriter, r *http.Request) {
	n.mu.Lock()
	p, seed := n.plan, n.seed != nil
	n.mu.Unlock()
	if seed {
		sp, status, err := n.seedPlan(r)
		if err != nil {
			http.Error(w, err.Error(), status)
			return
		}
		p = sp
	}
	n.mu.Lock()
	if from := r.URL.Query().Get("from"); p != nil && from != "" && !n.planRead[from] {
		n.planRead[from] = true
		n.signalLocked()
	}
	n.mu.Unlock()
	if p == nil {
		http.Error(w, "not restoring yet", http.StatusServiceUnavailable)
		return
	}
	body, err := json.Marshal(p)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	nonce := r.URL.Query().Get("nonce")
	if n.cfg.TLS {
		w.Header().Set(certHeader, n.certFP)
		w.Header().Set(proofHeader, certProof(n.cfg.Key, n.certFP, nonce))
	}
	w.Header().Set(planHeader, planMAC(n.cfg.Key, nonce, r.Host, body))
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	_, _ = w.Write(body)
}

// serveRange sends bytes of a range this node holds: key, range index i,
// skip bytes into it and at most n bytes (fewer at the end of an object,
// as S3 answers a range past the end). It waits for a range it is still
// fetching, at most the configured wait; a range it does not own, or
// could not fetch, is 404 at once, and the asker goes to the bucket.
func (n *Node) serveRange(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	key := q.Get("key")
	i, err1 := strconv.ParseInt(q.Get("i"), 10, 64)
	skip, err2 := strconv.ParseInt(q.Get("skip"), 10, 64)
	want, err3 := strconv.ParseInt(q.Get("n"), 10, 64)
	chunk, err4 := strconv.ParseInt(q.Get("chunk"), 10, 64)
	if err := errors.Join(err1, err2, err3, err4); err != nil || key == "" || i < 0 || skip < 0 || want < 0 || chunk <= 0 {
		http.Error(w, "want key, i, skip, n and chunk", http.StatusBadRequest)
		return
	}
	// A peer that has assigned the ranges may ask before this node has.
	select {
	case <-n.assigned:
	case <-time.After(n.cfg.Wait):
		http.Error(w, "not restoring yet", http.StatusNotFound)
		return
	case <-r.Context().Done():
		return
	}
	if n.serveHeld(r.Context(), w, key, i*chunk+skip, want) {
		return
	}
	sp := n.currentSpool()
	if sp == nil { // a seed: it serves only what it holds
		http.Error(w, errNotHeld.Error(), http.StatusNotFound)
		return
	}
	h, err := sp.wait(r.Context(), key, i, n.cfg.Wait)
	if err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	have := max(min(want, h.n-skip), 0)
	w.Header().Set("Content-Length", strconv.FormatInt(have, 10))
	w.Header().Set("Content-Type", "application/octet-stream")
	sent, _ := io.Copy(newStallWriter(w, n.cfg.limits.stall), sp.section(h, skip, have))
	n.stats.served.Add(sent)
}

// serveDone notes that the peer named by from has finished its restore.
func (n *Node) serveDone(w http.ResponseWriter, r *http.Request) {
	from := r.URL.Query().Get("from")
	n.mu.Lock()
	if !n.doneFrom[from] {
		n.doneFrom[from] = true
		n.signalLocked()
	}
	n.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// serveHeld serves a range of a file this node holds, from the restore's
// target directory or the agent's watched one (opened beneath it, no link
// followed), if key is one and the file is still the one planned (same
// device, inode, size and modification time); it reports whether it
// answered. The asker verifies
// the bytes like any others.
func (n *Node) serveHeld(ctx context.Context, w http.ResponseWriter, key string, off, want int64) bool {
	n.mu.Lock()
	h, ok := n.held[key]
	n.mu.Unlock()
	if !ok {
		return false
	}
	f, err := h.dir.OpenFile(filepath.ToSlash(h.rel))
	if err != nil {
		http.Error(w, errNotHeld.Error(), http.StatusNotFound)
		return true
	}
	defer f.Close()
	if id, _, err := identify(f); err != nil || id != h.id {
		n.log.Debug("a held file changed since it was planned: not serving it", zap.String("path", h.rel), zap.Error(err))
		http.Error(w, errNotHeld.Error(), http.StatusNotFound)
		return true
	}
	size := h.id.size
	have := max(min(want, size-off), 0)
	w.Header().Set("Content-Length", strconv.FormatInt(have, 10))
	w.Header().Set("Content-Type", "application/octet-stream")
	var body io.Reader = io.NewSectionReader(f, off, have)
	if n.cfg.Limiter != nil {
		body = &ratelimit.Body{R: body, L: n.cfg.Limiter, Ctx: ctx}
	}
	sent, _ := io.Copy(newStallWriter(w, n.cfg.limits.stall), body)
	n.stats.served.Add(sent)
	return true
}

// signalLocked wakes Finish; n.mu is held.
func (n *Node) signalLocked() {
	close(n.changed)
	n.changed = make(chan struct{})
}
