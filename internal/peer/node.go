package peer

import (
	"cmp"
	"context"
	"crypto/hmac"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/ferrylabs/ferry/internal/confine"
	"github.com/ferrylabs/ferry/internal/ctxtime"
	"github.com/ferrylabs/ferry/internal/ratelimit"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/restore"
)

// Defaults for Config fields left zero.
const (
	DefaultWait        = 10 * time.Second
	DefaultLinger      = 2 * time.Minute
	DefaultConcurrency = 16
)

// Config sets up one node of a cooperative restore.
type Config struct {
	// Bucket is the store the checkpoint is in.
	Bucket store.Store
	// Key is the job's shared secret (KeyFromToken, or derived from the
	// store's credentials over KeyLabel); every request between peers is
	// signed with it.
	Key []byte
	// Listen is the address this node serves its peers on, e.g. ":7077";
	// Listener, when set, is used instead (and closed by Close).
	Listen   string
	Listener net.Listener
	// Peers are every node's address as the others reach it (host:port),
	// the same list in the same order on every node; Self is this node's
	// index in it.
	Peers []string
	Self  int
	// Wait bounds each wait on a peer: for its plan when joining, and for
	// a range it is still fetching. Default DefaultWait.
	Wait time.Duration
	// Linger bounds how long Finish keeps serving peers that still need
	// this node's ranges. Default DefaultLinger.
	Linger time.Duration
	// Concurrency bounds this node's GETs to the bucket for the ranges it
	// owns. Default DefaultConcurrency.
	Concurrency int
	// SpoolDir holds the spool of owned ranges (an unlinked file); empty
	// means the restore's target directory, where the bytes go anyway
	// (it must exist when Join is called).
	SpoolDir string
	// Limiter, when set, paces what this node serves from files it holds
	// (the agent's --bandwidth).
	Limiter *ratelimit.Limiter
	// TLS serves and asks over TLS, with certificates the nodes make and
	// prove with the key (tls.go). Every node of the job must agree.
	TLS bool
	// Allow, when not nil, is every address the port accepts connections
	// from (--peer-allow): one from elsewhere is closed as it is accepted,
	// before a byte of it is read. Nil accepts any address (every request
	// must still be signed).
	Allow Allowed
	// Logger receives what happens between peers. Nil logs nothing.
	Logger *zap.Logger

	limits serverLimits // the server's timeouts and connection cap (limits.go)
}

// Node is one node of a cooperative restore: it serves its peers and is
// the source its own restore fetches from.
type Node struct {
	cfg    Config
	self   string
	log    *zap.Logger
	ln     net.Listener
	srv    *http.Server
	client *http.Client
	ctx    context.Context // ends at Close: stops the fetches of owned ranges
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu         sync.Mutex
	plan       *plan
	spool      *spool
	assign     *assignment
	sizes      map[string]int64
	assigned   chan struct{}           // closed once the ranges are assigned
	servedKeys map[string]bool         // objects of which this node serves a range
	held       map[string]heldFile     // object key -> a file this node holds and serves
	roots      map[string]*confine.Dir // the folders held files are opened beneath, by path, closed by Close
	seed       Holdings                // set for a seed (Seed): what it holds of a step
	localHosts map[string]bool         // a seed's answers to "is this host this machine?"
	doneFrom   map[string]bool
	planRead   map[string]bool   // peers that have read this node's plan
	pinned     map[string]string // peer address -> the certificate fingerprint it proved (TLS)
	seeds      map[string]bool   // peers that only serve (Seed)
	inView     map[string]bool   // peers whose plans this node has
	certFP     string            // this node's certificate fingerprint (TLS)
	changed    chan struct{}     // closed and replaced at each done notice or plan read
	joinedAt   time.Time
	dropped    map[string]string
	servedBy   map[string]map[string]bool // object key -> peers that sent bytes of it
	distrusted map[string]bool

	stats  counters
	open   atomic.Int64 // peer connections open now
	nonces nonces       // of the requests accepted lately (auth.go)
}

type counters struct {
	bucket, peers, local, served, fallbacks atomic.Int64
}

// Stats counts a node's bytes by where they came from.
type Stats struct {
	// Joined is the peers this node restored with, itself not included.
	Joined int `json:"joined"`
	// BucketBytes came from the bucket: owned ranges, fallbacks, and the
	// objects no other node needs or holds.
	BucketBytes int64 `json:"bucket_bytes"`
	// PeerBytes came from peers; LocalBytes from this node's own spool.
	PeerBytes  int64 `json:"peer_bytes"`
	LocalBytes int64 `json:"local_bytes"`
	// ServedBytes went to peers.
	ServedBytes int64 `json:"served_bytes"`
	// Fallbacks counts ranges fetched from the bucket because their owner
	// did not serve them.
	Fallbacks int64 `json:"fallbacks"`
	// Dropped maps each peer this node stopped asking to why.
	Dropped map[string]string `json:"dropped,omitempty"`
}

// Start listens on cfg.Listen and serves peers.
func Start(cfg Config) (*Node, error) {
	switch {
	case cfg.Bucket == nil:
		return nil, errors.New("peer: no bucket")
	case len(cfg.Key) == 0:
		return nil, errors.New("peer: no key")
	case cfg.Self < 0 || cfg.Self >= len(cfg.Peers):
		return nil, fmt.Errorf("peer: this node's index %d is not in the %d peers", cfg.Self, len(cfg.Peers))
	}
	cfg = cfg.withDefaults()
	ln := cfg.Listener
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", cfg.Listen); err != nil {
			return nil, fmt.Errorf("peer: listen on %s: %w", cfg.Listen, err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	n := &Node{cfg: cfg, self: cfg.Peers[cfg.Self], log: cfg.Logger, ln: ln, ctx: ctx, cancel: cancel,
		doneFrom: map[string]bool{}, planRead: map[string]bool{}, changed: make(chan struct{}), pinned: map[string]string{}, seeds: map[string]bool{}, inView: map[string]bool{}, assigned: make(chan struct{}), dropped: map[string]string{},
		servedBy: map[string]map[string]bool{}, distrusted: map[string]bool{}, roots: map[string]*confine.Dir{}, localHosts: map[string]bool{}}
	tr := &http.Transport{
		DialContext:            (&net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost:    maxConnsPerPeer,
		MaxConnsPerHost:        maxConnsPerPeer,
		ResponseHeaderTimeout:  cfg.Wait + 2*time.Second,
		MaxResponseHeaderBytes: 64 << 10,
		// Under the server's idle limit: a connection is not reused just
		// as the peer closes it.
		IdleConnTimeout: cfg.limits.idle * 2 / 3,
	}
	n.ln = limitListener(n.ln, cfg.limits, cfg.Allow, &refusals{log: cfg.Logger})
	n.srv = newServer(n.handler(), cfg.limits, cfg.Wait, &n.open)
	if cfg.TLS {
		if err := n.useTLS(tr); err != nil {
			ln.Close()
			cancel()
			return nil, err
		}
	}
	n.client = &http.Client{Transport: tr}
	n.wg.Go(func() { _ = n.srv.Serve(n.ln) })
	return n, nil
}

func (c Config) withDefaults() Config {
	if c.Wait <= 0 {
		c.Wait = DefaultWait
	}
	if c.Linger <= 0 {
		c.Linger = DefaultLinger
	}
	if c.Concurrency <= 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	c.limits = c.limits.withDefaults()
	return c
}

// Addr is the address the node listens on.
func (n *Node) Addr() string { return n.ln.Addr().String() }

func (n *Node) currentSpool() *spool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.spool
}

// Join starts the cooperative restore that req describes: the objects
// this node fetches, in the order it fetches them, in ranges of req.Chunk
// bytes, and those it holds already. It publishes its plan, waits at most
// Wait for each peer's, assigns each range to one node (one that holds
// the object, else one that needs it), starts fetching this node's ranges
// from the bucket, and returns the store the restore reads from: its own
// ranges from the spool, the others from their owners, and the bucket for
// anything a peer does not serve.
func (n *Node) Join(ctx context.Context, req restore.PeerRequest) (store.Store, error) {
	if err := n.publish(req); err != nil {
		return nil, err
	}
	n.mu.Lock()
	p, sp := n.plan, n.spool
	n.mu.Unlock()
	plans := n.gatherPlans(ctx, p)
	n.mu.Lock()
	for addr := range plans {
		n.inView[addr] = true
	}
	n.mu.Unlock()
	a := newAssignment(n.self, req.Chunk, plans)
	owned := n.expectOwned(a, p, sp)
	n.mu.Lock()
	n.assign = a
	n.servedKeys = map[string]bool{}
	for _, r := range owned {
		n.servedKeys[r.key] = true
	}
	for key := range n.held {
		n.servedKeys[key] = true
	}
	n.mu.Unlock()
	close(n.assigned)
	n.log.Info("restoring with peers", zap.Int("joined", len(plans)-1), zap.Int("peers", len(n.cfg.Peers)-1),
		zap.Int("ranges_owned", len(owned)), zap.Int("files_held", len(p.Held)))
	n.wg.Go(func() { n.fetchOwned(owned) })
	return &source{Store: n.cfg.Bucket, n: n}, nil
}

// publish makes this node's plan of req and its spool, so that its plan
// is served from now on. Packed files are left out (see addHeld).
func (n *Node) publish(req restore.PeerRequest) error {
	p := &plan{Step: req.Step, Chunk: req.Chunk, Files: make([]object, 0, len(req.Fetch))}
	sizes := make(map[string]int64, len(req.Fetch)+len(req.Held))
	for _, f := range req.Fetch {
		if f.Packed() {
			continue // a pack's key is not this file's object: the bucket serves it
		}
		p.Files = append(p.Files, object{Key: f.Key, Size: f.Size})
		sizes[f.Key] = f.Size
	}
	var held map[string]heldFile
	if len(req.Held) > 0 {
		d, err := n.dir(req.Dir)
		if err != nil {
			return fmt.Errorf("peer: open %s to serve the files it holds: %w", req.Dir, err)
		}
		held, p.Held = n.heldFiles(d, req.Held, false)
		for _, h := range p.Held {
			sizes[h.Key] = h.Size
		}
	}
	sp, err := newSpool(cmp.Or(n.cfg.SpoolDir, req.Dir))
	if err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.plan, n.spool, n.sizes, n.held = p, sp, sizes, held
	n.joinedAt = time.Now()
	return nil
}

// gatherPlans asks every peer for its plan until it has one for the same
// step and range size, for at most Wait. The result includes this node's.
func (n *Node) gatherPlans(ctx context.Context, own *plan) map[string]*plan {
	var mu sync.Mutex
	plans := map[string]*plan{n.self: own}
	ctx, cancel := context.WithTimeout(ctx, n.cfg.Wait)
	defer cancel()
	var g errgroup.Group
	for i, addr := range n.cfg.Peers {
		if i == n.cfg.Self {
			continue
		}
		g.Go(func() error {
			p, err := n.peerPlan(ctx, addr, own)
			if err == nil && (p.Step != own.Step || p.Chunk != own.Chunk) {
				err = fmt.Errorf("it restores step %d in %d-byte ranges, this node step %d in %d", p.Step, p.Chunk, own.Step, own.Chunk)
			}
			if err != nil {
				n.log.Warn("restoring without a peer", zap.String("peer", addr), zap.Error(err))
				return nil
			}
			mu.Lock()
			plans[addr] = p
			mu.Unlock()
			if p.Seed {
				n.mu.Lock()
				n.seeds[addr] = true
				n.mu.Unlock()
			}
			return nil
		})
	}
	_ = g.Wait()
	return plans
}

// peerPlan polls addr for its plan until it answers or ctx ends.
func (n *Node) peerPlan(ctx context.Context, addr string, own *plan) (*plan, error) {
	var last error
	delay := 10 * time.Millisecond
	for {
		nonce := newNonce()
		q := url.Values{"from": {n.self}, "nonce": {nonce}, "step": {strconv.FormatInt(own.Step, 10)}, "chunk": {strconv.FormatInt(own.Chunk, 10)}}
		resp, err := n.do(ctx, http.MethodGet, addr, "/v1/plan", q)
		if err == nil {
			if resp.StatusCode == http.StatusOK {
				p, err := n.readPlan(addr, nonce, resp)
				resp.Body.Close()
				return p, err // a wrong answer is not a node of this job: no point asking again
			}
			resp.Body.Close()
			err = fmt.Errorf("answered %s", resp.Status)
		}
		last = err
		// Peers start together: ask again soon, then less often.
		if ctxtime.Sleep(ctx, delay) != nil {
			return nil, fmt.Errorf("no plan within the wait: %w", last)
		}
		delay = min(2*delay, 200*time.Millisecond)
	}
}

// readPlan reads a plan answer from addr to the request with nonce: at
// most maxPlanBytes, with the job's MAC over it (and, over TLS, the proof
// of the certificate).
func (n *Node) readPlan(addr, nonce string, resp *http.Response) (*plan, error) {
	if n.cfg.TLS {
		if err := n.checkCert(addr, nonce, resp); err != nil {
			return nil, err
		}
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxPlanBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read its plan: %w", err)
	}
	if len(body) > maxPlanBytes {
		return nil, fmt.Errorf("its plan answer is over %d MiB: not a node of this job", maxPlanBytes>>20)
	}
	if !hmac.Equal([]byte(resp.Header.Get(planHeader)), []byte(planMAC(n.cfg.Key, nonce, addr, body))) {
		return nil, errors.New("its plan answer is not signed with the job's peer key")
	}
	var p plan
	if err := json.Unmarshal(body, &p); err != nil {
		return nil, fmt.Errorf("its plan: %w", err)
	}
	return &p, nil
}

// do sends a signed request to a peer.
func (n *Node) do(ctx context.Context, method, addr, path string, q url.Values) (*http.Response, error) {
	scheme := "http"
	if n.cfg.TLS {
		scheme = "https"
	}
	u := url.URL{Scheme: scheme, Host: addr, Path: path, RawQuery: q.Encode()}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), nil)
	if err != nil {
		return nil, err
	}
	sign(req, n.cfg.Key, time.Now())
	return n.client.Do(req)
}
