package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/urfave/cli/v2"
	"go.uber.org/zap"

	"github.com/ferrylabs/ferry/internal/s3store"
	"github.com/ferrylabs/ferry/manifest"
	"github.com/ferrylabs/ferry/peer"
)

// peerOptions are restore's flags for restoring with peers.
type peerOptions struct {
	spec, listen, token string
	rank                int
	wait, linger        time.Duration
}

func peerFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "peers", EnvVars: []string{"FERRY_PEERS"}, Usage: "restore together with the other nodes restoring the step, each range from the bucket once between them: `LIST` of host[:port], \"slurm\" (the job's nodes) or \"dns:NAME\" (a headless service)"},
		&cli.StringFlag{Name: "peer-listen", Value: ":7077", EnvVars: []string{"FERRY_PEER_LISTEN"}, Usage: "with --peers: the `ADDRESS` to serve peers on; its port is the peers' where --peers gives none"},
		&cli.IntFlag{Name: "peer-rank", Value: -1, Usage: "with --peers: this node's index in the list (default: the entry naming this machine)"},
		&cli.StringFlag{Name: "peer-token", EnvVars: []string{"FERRY_PEER_TOKEN"}, Usage: "with --peers: a secret every node of the job shares, to authenticate peers (default: derived from the store credentials)"},
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
		rank: c.Int("peer-rank"), wait: c.Duration("peer-wait"), linger: c.Duration("peer-linger")}
	if _, _, err := net.SplitHostPort(o.listen); err != nil {
		return nil, usagef("--peer-listen %q: want host:port or :port", o.listen)
	}
	if o.wait <= 0 || o.linger <= 0 {
		return nil, usagef("--peer-wait and --peer-linger must be positive")
	}
	return o, nil
}

// startPeers starts this node's peer server and returns it.
func (o *peerOptions) start(ctx context.Context, st *s3store.Store, loc manifest.Location, dir string, concurrency int, log *zap.Logger) (*peer.Node, error) {
	_, port, _ := net.SplitHostPort(o.listen)
	peers, err := peer.Resolve(ctx, o.spec, port)
	if err != nil {
		return nil, usagef("%v", err)
	}
	if o.rank >= len(peers) {
		return nil, usagef("--peer-rank %d: --peers lists %d nodes", o.rank, len(peers))
	}
	if len(peers) == 1 {
		log.Info("--peers lists this node alone: restoring from the bucket")
		return nil, nil
	}
	self := o.rank
	if self < 0 {
		if self, err = peer.SelfIndex(ctx, peers); err != nil {
			return nil, usagef("--peers: %v", err)
		}
	}
	key := peer.KeyFromToken(o.token)
	if o.token == "" {
		if key, err = st.DeriveKey(ctx, peer.KeyLabel(loc.Bucket, loc.Prefix)); err != nil {
			return nil, fmt.Errorf("--peers: %w (give --peer-token)", err)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("restore into %s: %w", dir, err)
	}
	return peer.Start(peer.Config{Bucket: st, Key: key, Listen: o.listen, Peers: peers, Self: self,
		Wait: o.wait, Linger: o.linger, Concurrency: min(concurrency, peer.DefaultConcurrency), SpoolDir: dir, Logger: log})
}
