package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"
	"go.uber.org/zap"

	"github.com/ferrylabs/ferry/agent"
	"github.com/ferrylabs/ferry/internal/peer"
	"github.com/ferrylabs/ferry/internal/ratelimit"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/manifest"
)

// peerOptions are restore's flags for restoring with peers.
type peerOptions struct {
	spec, listen, token string
	allow               string // --peer-allow ("": any address)
	group, advertise    string
	rank                int
	wait, linger        time.Duration
	tls                 bool
}

// defaultPeerPort is the peers' port where neither --peers nor
// --peer-listen gives one.
const defaultPeerPort = "7077"

func peerFlags() []cli.Flag {
	flags := []cli.Flag{
		&cli.StringFlag{Name: "peers", EnvVars: []string{"FERRY_PEERS"}, Usage: "restore together with the other nodes restoring the step, each range from the bucket once between them: `LIST` of host[:port], \"slurm\" (the job's nodes), \"dns:NAME\" (a headless service) or \"bucket:N\" (N nodes that announce themselves in the bucket, --peer-group); peers talk on --peer-listen's port, 7077 (default: none, restore alone)"},
		&cli.StringFlag{Name: "peer-group", EnvVars: []string{"FERRY_PEER_GROUP"}, Usage: "with --peers bucket:N: the `ID` the nodes of this job share, new at each restart (default: SLURM_JOB_ID)"},
		&cli.StringFlag{Name: "peer-advertise", EnvVars: []string{"FERRY_PEER_ADVERTISE"}, Usage: "with --peers bucket:N: the `HOST:PORT` the others reach this node at (default: --peer-listen's host, else this machine's first non-loopback address)"},
		&cli.StringFlag{Name: "peer-listen", EnvVars: []string{"FERRY_PEER_LISTEN"}, Usage: "with --peers: the `ADDRESS` to serve peers on (default: this node's own address in the peers, port " + defaultPeerPort + ", not every interface); its port is the peers' where --peers gives none. If it cannot be opened, this node restores from the bucket alone"},
		peerAllowFlag("with --peers", "\"peers\" (the hosts --peers names, resolved when the restore starts), addresses and CIDRs (10.0.0.0/16, fd00::/64)"),
		&cli.IntFlag{Name: "peer-rank", Value: -1, Usage: "with --peers: this node's index in the list (default: the entry naming this machine)"},
	}
	flags = append(flags, peerTokenFlags("with --peers")...)
	return append(flags,
		&cli.BoolFlag{Name: "peer-tls", EnvVars: []string{"FERRY_PEER_TLS"}, Usage: "with --peers: encrypt the bytes between peers (TLS with certificates the nodes make and prove with the peers' key); every node must agree"},
		&cli.DurationFlag{Name: "peer-wait", Value: peer.DefaultWait, EnvVars: []string{"FERRY_PEER_WAIT"}, Usage: "with --peers: the most to wait for a peer (to join, or to serve a range it is fetching) before going to the bucket"},
		&cli.DurationFlag{Name: "peer-linger", Value: peer.DefaultLinger, EnvVars: []string{"FERRY_PEER_LINGER"}, Usage: "with --peers: the most to keep serving peers that still need this node's ranges after the restore"},
	)
}

func readPeerOptions(c *cli.Context) (*peerOptions, error) {
	if c.String("peers") == "" {
		if c.IsSet("peer-rank") {
			return nil, usagef("--peer-rank needs --peers")
		}
		return nil, nil
	}
	o := &peerOptions{spec: c.String("peers"), listen: c.String("peer-listen"),
		group: c.String("peer-group"), advertise: c.String("peer-advertise"),
		rank: c.Int("peer-rank"), wait: c.Duration("peer-wait"), linger: c.Duration("peer-linger"), tls: c.Bool("peer-tls")}
	if _, _, err := net.SplitHostPort(o.listen); o.listen != "" && err != nil {
		return nil, usagef("--peer-listen %q: want host:port or :port", o.listen)
	}
	var err error
	if o.token, err = readPeerToken(c); err != nil {
		return nil, err
	}
	if o.allow, err = readPeerAllow(c, true); err != nil {
		return nil, err
	}
	if o.wait <= 0 || o.linger <= 0 {
		return nil, usagef("--peer-wait and --peer-linger must be positive")
	}
	return o, nil
}

// start starts this node's peer server and returns it, with what to do
// when the restore is over; a nil node when --peers names this node alone
// or its port cannot be opened (it restores from the bucket alone).
func (o *peerOptions) start(ctx context.Context, st store.Store, loc manifest.Location, dir string, concurrency int, log *zap.Logger) (*peer.Node, func(), error) {
	peers, self, ln, cleanup, err := o.members(ctx, st, loc, log)
	if err != nil || ln == nil {
		return nil, cleanup, err
	}
	fail := func(err error) (*peer.Node, func(), error) {
		ln.Close()
		cleanup()
		return nil, nil, err
	}
	key, err := peerKey(ctx, st, loc, o.token, "--peers")
	if err != nil {
		return fail(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fail(fmt.Errorf("restore into %s: %w", dir, err))
	}
	n, err := peer.Start(peer.Config{Bucket: st, Key: key, Listener: ln, Peers: peers, Self: self,
		Wait: o.wait, Linger: o.linger, Concurrency: min(concurrency, peer.DefaultConcurrency), SpoolDir: dir, TLS: o.tls,
		Allow: allowed(ctx, o.allow, peers, log), Logger: log})
	if err != nil {
		return fail(err)
	}
	return n, cleanup, nil
}

// members resolves --peers into the nodes' addresses and this node's
// index, and opens this node's port (bind); with bucket:N it opens it,
// then announces this node in the bucket and finds the others there, and
// cleanup withdraws the announcement. A nil listener: restore alone.
func (o *peerOptions) members(ctx context.Context, st store.Store, loc manifest.Location, log *zap.Logger) ([]string, int, net.Listener, func(), error) {
	host, port := o.listenHostPort()
	nothing := func() {}
	if count, ok := strings.CutPrefix(o.spec, "bucket:"); ok {
		n, err := strconv.Atoi(count)
		if err != nil || n < 1 {
			return nil, 0, nil, nil, usagef("--peers %s: want bucket:N, N the number of nodes", o.spec)
		}
		group := cmp.Or(o.group, os.Getenv("SLURM_JOB_ID"))
		if group == "" {
			return nil, 0, nil, nil, usagef("--peers %s needs --peer-group (an ID the job's nodes share, new at each restart)", o.spec)
		}
		if err := peer.CheckGroup(group); err != nil {
			return nil, 0, nil, nil, usagef("--peer-group: %v", err)
		}
		addr := o.advertise
		if addr == "" {
			addr = net.JoinHostPort(advertiseHost(host), port)
		}
		ln := o.bind(ctx, addr, nil, log)
		if ln == nil {
			return nil, 0, nil, nothing, nil
		}
		withdraw, err := peer.Announce(ctx, st, loc.Prefix, group, addr)
		if err != nil {
			ln.Close()
			return nil, 0, nil, nil, err
		}
		cleanup := func() {
			c, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			withdraw(c)
		}
		peers, err := peer.Discover(ctx, st, loc.Prefix, group, n, o.wait)
		if err != nil {
			ln.Close()
			cleanup()
			return nil, 0, nil, nil, err
		}
		return peers, slices.Index(peers, addr), ln, cleanup, nil
	}
	peers, self, err := o.list(ctx, port)
	if err != nil {
		return nil, 0, nil, nil, err
	}
	if len(peers) == 1 {
		log.Info("--peers lists this node alone: restoring from the bucket")
		return nil, 0, nil, nothing, nil
	}
	return peers, self, o.bind(ctx, peers[self], peers, log), nothing, nil
}

// list resolves a --peers list and finds this node in it.
func (o *peerOptions) list(ctx context.Context, port string) ([]string, int, error) {
	peers, err := peer.Resolve(ctx, o.spec, port)
	if err != nil {
		return nil, 0, usagef("%v", err)
	}
	if o.rank >= len(peers) {
		return nil, 0, usagef("--peer-rank %d: --peers lists %d nodes", o.rank, len(peers))
	}
	if len(peers) == 1 || o.rank >= 0 {
		return peers, max(o.rank, 0), nil
	}
	self, err := peer.SelfIndex(ctx, peers)
	if err != nil {
		return nil, 0, usagef("--peers: %v", err)
	}
	return peers, self, nil
}

// listenHostPort is --peer-listen's host ("" for none) and port (the
// default one for none).
func (o *peerOptions) listenHostPort() (string, string) {
	host, port, _ := net.SplitHostPort(o.listen)
	return host, cmp.Or(port, defaultPeerPort)
}

// bind opens this node's peer port: on --peer-listen, else on self, the
// address the others know this node by, so that the port is not open on
// every interface. Where self cannot be this node's own address (its name
// resolves to loopback here, as a Debian /etc/hosts line makes it, while
// the peers are other machines; or to an address this machine does not
// have, behind NAT) it listens on every interface, with a warning. A port
// that cannot be opened (taken, say) is a warning, not an error: the node
// restores from the bucket alone (nil), as a cooperative restore promises
// to finish whenever the bucket is reachable.
func (o *peerOptions) bind(ctx context.Context, self string, peers []string, log *zap.Logger) net.Listener {
	addr := o.listen
	if addr == "" {
		addr = self
		if host, port, _ := net.SplitHostPort(self); loopbackOnly(ctx, host) && !sameHost(peers) {
			log.Warn("this node's name resolves to loopback here, where the peers cannot reach it: serving peers on every interface (give --peer-listen)",
				zap.String("name", host))
			addr = net.JoinHostPort("", port)
		}
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil && o.listen == "" && errors.Is(err, syscall.EADDRNOTAVAIL) {
		_, port, _ := net.SplitHostPort(addr)
		log.Warn("this node's address in the peers is not one of this machine's: serving peers on every interface (give --peer-listen)",
			zap.String("addr", addr))
		addr = net.JoinHostPort("", port)
		ln, err = net.Listen("tcp", addr)
	}
	if err != nil {
		log.Warn("cannot serve peers: restoring from the bucket alone", zap.String("listen", addr), zap.Error(err))
		return nil
	}
	log.Info("serving peers", zap.String("listen", ln.Addr().String()))
	return ln
}

// loopbackOnly reports whether host resolves to loopback addresses only.
func loopbackOnly(ctx context.Context, host string) bool {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	ips, err := net.DefaultResolver.LookupIPAddr(ctx, host)
	if err != nil || len(ips) == 0 {
		return false
	}
	for _, ip := range ips {
		if !ip.IP.IsLoopback() {
			return false
		}
	}
	return true
}

// sameHost reports whether every peer is on one host (a test's, or one
// machine's several restores).
func sameHost(peers []string) bool {
	for _, p := range peers {
		h, _, _ := net.SplitHostPort(p)
		h0, _, _ := net.SplitHostPort(peers[0])
		if h != h0 {
			return false
		}
	}
	return true
}

// advertiseHost is the host others reach this node at: listen's, when it
// names one, else this machine's first non-loopback address, else its
// host name.
func advertiseHost(listen string) string {
	if listen != "" && listen != "0.0.0.0" && listen != "::" {
		return listen
	}
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && !ipn.IP.IsLoopback() && ipn.IP.To4() != nil {
				return ipn.IP.String()
			}
		}
	}
	h, _ := os.Hostname()
	return h
}

// startSeed serves the agent's committed steps to restoring nodes
// (agent --serve-peers).
func startSeed(ctx context.Context, o agentOptions, st store.Store, loc manifest.Location, a *agent.Agent, limiter *ratelimit.Limiter, log *zap.Logger) (*peer.Node, error) {
	if _, _, err := net.SplitHostPort(o.servePeers); err != nil {
		return nil, usagef("--serve-peers %q: want host:port or :port", o.servePeers)
	}
	key, err := peerKey(ctx, st, loc, o.peerToken, "--serve-peers")
	if err != nil {
		return nil, err
	}
	n, err := peer.Seed(peer.Config{Bucket: st, Key: key, Listen: o.servePeers, TLS: o.peerTLS, Limiter: limiter,
		Allow: allowed(ctx, o.peerAllow, nil, log), Logger: log}, a.Holdings)
	if err != nil {
		return nil, err
	}
	log.Info("serving committed steps to restoring peers", zap.String("addr", n.Addr()))
	return n, nil
}

// peerKey is the key peers sign with: from the token (readPeerToken), else derived
// from the store credentials for this bucket and prefix.
func peerKey(ctx context.Context, st store.Store, loc manifest.Location, token, flag string) ([]byte, error) {
	if token != "" {
		return peer.KeyFromToken(token), nil
	}
	d, ok := st.(interface {
		DeriveKey(ctx context.Context, label string) ([]byte, error)
	})
	if !ok {
		return nil, usagef("%s with %s: a folder has no credentials to derive the peers' key from: give --peer-token", flag, loc)
	}
	key, err := d.DeriveKey(ctx, peer.KeyLabel(loc.Bucket, loc.Prefix))
	if err != nil {
		return nil, fmt.Errorf("%s: %w (give --peer-token-file)", flag, err)
	}
	return key, nil
}

// allowed is the peer port's allow list from --peer-allow (spec, checked
// by readPeerAllow; "" admits any address), with "peers" resolved to the
// addresses of peers' hosts now. A host that does not resolve is left
// out with a warning: its node cannot connect, and it restores from the
// bucket.
func allowed(ctx context.Context, spec string, peers []string, log *zap.Logger) peer.Allowed {
	if spec == "" {
		return nil
	}
	a, named, _ := peer.ParseAllow(spec)
	if named {
		hosts, errs := peer.ResolvePeers(ctx, peers)
		for _, err := range errs {
			log.Warn("--peer-allow peers: a peer's name does not resolve: its connections are refused", zap.Error(err))
		}
		a = append(a, hosts...)
	}
	log.Info("the peer port accepts connections only from --peer-allow", zap.Stringer("allow", a))
	return a
}
