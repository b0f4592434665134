package main

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	"go.uber.org/zap"

	"github.com/ferrylabs/ferry/agent"
	"github.com/ferrylabs/ferry/internal/ratelimit"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/manifest"
	"github.com/ferrylabs/ferry/peer"
)

// peerOptions are restore's flags for restoring with peers.
type peerOptions struct {
	spec, listen, token string
	group, advertise    string
	rank                int
	wait, linger        time.Duration
	tls                 bool
}

func peerFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "peers", EnvVars: []string{"FERRY_PEERS"}, Usage: "restore together with the other nodes restoring the step, each range from the bucket once between them: `LIST` of host[:port], \"slurm\" (the job's nodes), \"dns:NAME\" (a headless service) or \"bucket:N\" (N nodes that announce themselves in the bucket, --peer-group)"},
		&cli.StringFlag{Name: "peer-group", EnvVars: []string{"FERRY_PEER_GROUP"}, Usage: "with --peers bucket:N: the `ID` the nodes of this job share, new at each restart (default: SLURM_JOB_ID)"},
		&cli.StringFlag{Name: "peer-advertise", EnvVars: []string{"FERRY_PEER_ADVERTISE"}, Usage: "with --peers bucket:N: the `HOST:PORT` the others reach this node at (default: --peer-listen's host, else this machine's first non-loopback address)"},
		&cli.StringFlag{Name: "peer-listen", Value: ":7077", EnvVars: []string{"FERRY_PEER_LISTEN"}, Usage: "with --peers: the `ADDRESS` to serve peers on; its port is the peers' where --peers gives none"},
		&cli.IntFlag{Name: "peer-rank", Value: -1, Usage: "with --peers: this node's index in the list (default: the entry naming this machine)"},
		&cli.StringFlag{Name: "peer-token", EnvVars: []string{"FERRY_PEER_TOKEN"}, Usage: "with --peers: a secret every node of the job shares, to authenticate peers (default: derived from the store credentials)"},
		&cli.BoolFlag{Name: "peer-tls", EnvVars: []string{"FERRY_PEER_TLS"}, Usage: "with --peers: encrypt the bytes between peers (TLS with certificates the nodes make and prove with the peers' key); every node must agree"},
		&cli.DurationFlag{Name: "peer-wait", Value: peer.DefaultWait, EnvVars: []string{"FERRY_PEER_WAIT"}, Usage: "with --peers: the most to wait for a peer (to join, or to serve a range it is fetching) before going to the bucket"},
		&cli.DurationFlag{Name: "peer-linger", Value: peer.DefaultLinger, EnvVars: []string{"FERRY_PEER_LINGER"}, Usage: "with --peers: the most to keep serving peers that still need this node's ranges after the restore"},
	}
}

func readPeerOptions(c *cli.Context) (*peerOptions, error) {
	if c.String("peers") == "" {
		if c.IsSet("peer-rank") {
			return nil, usagef("--peer-rank needs --peers")
		}
		return nil, nil
	}
	o := &peerOptions{spec: c.String("peers"), listen: c.String("peer-listen"), token: c.String("peer-token"),
		group: c.String("peer-group"), advertise: c.String("peer-advertise"),
		rank: c.Int("peer-rank"), wait: c.Duration("peer-wait"), linger: c.Duration("peer-linger"), tls: c.Bool("peer-tls")}
	if _, _, err := net.SplitHostPort(o.listen); err != nil {
		return nil, usagef("--peer-listen %q: want host:port or :port", o.listen)
	}
	if o.wait <= 0 || o.linger <= 0 {
		return nil, usagef("--peer-wait and --peer-linger must be positive")
	}
	return o, nil
}

// start starts this node's peer server and returns it, with what to do
// when the restore is over; a nil node when --peers names this node alone.
func (o *peerOptions) start(ctx context.Context, st store.Store, loc manifest.Location, dir string, concurrency int, log *zap.Logger) (*peer.Node, func(), error) {
	peers, self, cleanup, err := o.members(ctx, st, loc)
	if err != nil {
		return nil, nil, err
	}
	if len(peers) == 1 {
		log.Info("--peers lists this node alone: restoring from the bucket")
		return nil, cleanup, nil
	}
	key, err := peerKey(ctx, st, loc, o.token, "--peers")
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		cleanup()
		return nil, nil, fmt.Errorf("restore into %s: %w", dir, err)
	}
	n, err := peer.Start(peer.Config{Bucket: st, Key: key, Listen: o.listen, Peers: peers, Self: self,
		Wait: o.wait, Linger: o.linger, Concurrency: min(concurrency, peer.DefaultConcurrency), SpoolDir: dir, TLS: o.tls, Logger: log})
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	return n, cleanup, nil
}

// members resolves --peers into the nodes' addresses and this node's
// index; with bucket:N it announces this node in the bucket and finds the
// others there, and cleanup withdraws the announcement.
func (o *peerOptions) members(ctx context.Context, st store.Store, loc manifest.Location) ([]string, int, func(), error) {
	host, port, _ := net.SplitHostPort(o.listen)
	nothing := func() {}
	if count, ok := strings.CutPrefix(o.spec, "bucket:"); ok {
		n, err := strconv.Atoi(count)
		if err != nil || n < 1 {
			return nil, 0, nil, usagef("--peers %s: want bucket:N, N the number of nodes", o.spec)
		}
		group := cmp.Or(o.group, os.Getenv("SLURM_JOB_ID"))
		if group == "" {
			return nil, 0, nil, usagef("--peers %s needs --peer-group (an ID the job's nodes share, new at each restart)", o.spec)
		}
		if err := peer.CheckGroup(group); err != nil {
			return nil, 0, nil, usagef("--peer-group: %v", err)
		}
		addr := o.advertise
		if addr == "" {
			addr = net.JoinHostPort(advertiseHost(host), port)
		}
		withdraw, err := peer.Announce(ctx, st, loc.Prefix, group, addr)
		if err != nil {
			return nil, 0, nil, err
		}
		cleanup := func() {
			c, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			withdraw(c)
		}
		peers, err := peer.Discover(ctx, st, loc.Prefix, group, n, o.wait)
		if err != nil {
			cleanup()
			return nil, 0, nil, err
		}
		return peers, slices.Index(peers, addr), cleanup, nil
	}
	peers, err := peer.Resolve(ctx, o.spec, port)
	if err != nil {
		return nil, 0, nil, usagef("%v", err)
	}
	if o.rank >= len(peers) {
		return nil, 0, nil, usagef("--peer-rank %d: --peers lists %d nodes", o.rank, len(peers))
	}
	if len(peers) == 1 || o.rank >= 0 {
		return peers, max(o.rank, 0), nothing, nil
	}
	self, err := peer.SelfIndex(ctx, peers)
	if err != nil {
		return nil, 0, nil, usagef("--peers: %v", err)
	}
	return peers, self, nothing, nil
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
	n, err := peer.Seed(peer.Config{Bucket: st, Key: key, Listen: o.servePeers, TLS: o.peerTLS, Limiter: limiter, Logger: log}, a.Holdings)
	if err != nil {
		return nil, err
	}
	log.Info("serving committed steps to restoring peers", zap.String("addr", n.Addr()))
	return n, nil
}

// peerKey is the key peers sign with: from --peer-token, else derived
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
		return nil, fmt.Errorf("%s: %w (give --peer-token)", flag, err)
	}
	return key, nil
}
