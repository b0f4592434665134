package bench

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/ferrylabs/ferry/uploader"
)

// The peers phase: N nodes restore one step at once, each as its own
// `ferry restore` process into its own directory, alone (solo: every node
// fetches what it needs from the bucket) and together (`--peers`: each
// range from the bucket once between them, the rest from each other over
// loopback). Only the bucket is behind -wan's link; the peers talk
// directly.

// Cases of the peers phase.
const (
	peersWhole    = "whole"    // every node needs every file of the step
	peersDisjoint = "disjoint" // node i needs only rank i's files
)

// Modes of a peers-phase run.
const (
	modeSolo  = "solo"
	modePeers = "peers"
)

// peersCase is one step the nodes restore.
type peersCase struct {
	name   string
	prefix string
	ds     *dataset
	// ranked maps each file of a disjoint step to its rank.
	ranked map[string]int
	// hashes is the BLAKE3 of every pushed file, by relative path.
	hashes map[string]string
}

// need lists the files node i of n restores in case c.
func (c *peersCase) need(i int) []string {
	if c.ranked == nil {
		return c.ds.rel
	}
	var out []string
	for _, rel := range c.ds.rel {
		if c.ranked[rel] == i {
			out = append(out, rel)
		}
	}
	return out
}

// stepBytes is what n nodes need of c between them: each byte counted
// once.
func (c *peersCase) stepBytes(n int) int64 {
	if c.ranked == nil {
		return c.ds.bytes()
	}
	var total int64
	for i := range n {
		total += int64(len(c.need(i))) * c.ds.size
	}
	return total
}

// peersRun is one run: n nodes restoring case Case at once, alone or
// with --peers. Counts are summed over the nodes.
type peersRun struct {
	Case   string `json:"case"`
	Nodes  int    `json:"nodes"`
	Mode   string `json:"mode"`
	Round  int    `json:"round"`
	Warmup bool   `json:"warmup,omitempty"`
	// WallS runs from the start of the first node to the exit of the last
	// (a --peers node lingers while others still need its ranges).
	WallS float64 `json:"wall_s"`
	// NodeWallS is each node's process wall time; NodeRestoreS the
	// "seconds" its --json printed (the restore alone, without lingering).
	NodeWallS    []float64 `json:"node_wall_s"`
	NodeRestoreS []float64 `json:"node_restore_s"`
	// GETs and Requests are the S3 requests the nodes counted (--json's
	// "requests": GetObject, all operations).
	GETs     int64 `json:"client_get_requests"`
	Requests int64 `json:"client_requests"`
	// BucketBytes came from the bucket: peers.bucket_bytes with --peers,
	// bytes_downloaded alone.
	BucketBytes int64 `json:"bucket_bytes"`
	// PeerBytes came from other nodes, LocalBytes from a node's own spool,
	// ServedBytes went to other nodes (peers.*, --peers only).
	PeerBytes   int64 `json:"peer_bytes"`
	LocalBytes  int64 `json:"local_bytes"`
	ServedBytes int64 `json:"served_bytes"`
	Fallbacks   int64 `json:"fallbacks"`
	Dropped     int   `json:"dropped"`
	// MinJoined is the fewest peers any node restored with (n-1 when every
	// node found every other).
	MinJoined int `json:"min_joined,omitempty"`
	// The server's side: GetObject requests in versitygw's access log, and
	// the bytes it wrote to its sockets (wchar of /proc/PID/io less the
	// access log's growth: response bodies and headers).
	ServerGETs      int64   `json:"server_get_requests"`
	ServerRequests  int64   `json:"server_requests"`
	ServerSentBytes int64   `json:"server_sent_bytes"`
	ServerCPUS      float64 `json:"server_cpu_s"`
	LinkCPUS        float64 `json:"link_cpu_s,omitempty"`
	// ClientCPUS is user+sys of every node.
	ClientCPUS float64 `json:"client_cpu_s"`
}

// peersSummary is one mode of one row over the measured rounds: medians.
type peersSummary struct {
	Runs            int     `json:"runs"`
	WallS           float64 `json:"median_wall_s"`
	BucketBytes     float64 `json:"median_bucket_bytes"`
	PeerBytes       float64 `json:"median_peer_bytes"`
	GETs            float64 `json:"median_client_get_requests"`
	ServerGETs      float64 `json:"median_server_get_requests"`
	ServerSentBytes float64 `json:"median_server_sent_bytes"`
	ClientCPUS      float64 `json:"median_client_cpu_s"`
	ServerCPUS      float64 `json:"median_server_cpu_s"`
}

// peersRow is one case at one node count.
type peersRow struct {
	Case  string `json:"case"`
	Nodes int    `json:"nodes"`
	// StepBytes is what the nodes need between them, each byte once: the
	// whole step, or n ranks' files.
	StepBytes int64        `json:"step_bytes"`
	Solo      peersSummary `json:"solo"`
	Peers     peersSummary `json:"peers"`
	// Ratio is the peers' median wall over solo's.
	Ratio float64 `json:"peers_vs_solo_wall"`
}

type peersResult struct {
	Files    int   `json:"files"`
	FileSize int64 `json:"file_size_bytes"`
	// ServerCounts says whether versitygw's access log was read (the
	// server-side request counts).
	ServerCounts bool       `json:"server_counts"`
	Link         string     `json:"link,omitempty"`
	Runs         []peersRun `json:"runs"`
	Rows         []peersRow `json:"rows"`
}

// peersPhase pushes the two steps, then for each node count and case runs
// the nodes alone and with --peers, alternating (the order swapping every
// round), -warmup rounds first, and checks every node's files.
func (b *bench) peersPhase(ctx context.Context) error {
	maxNodes := 0
	for _, n := range b.cfg.peerNodes {
		maxNodes = max(maxNodes, n)
	}
	whole := &dataset{name: peersWhole, dir: filepath.Join(b.work, "peers-data", peersWhole), rel: bigNames(b.cfg.files), size: b.cfg.size}
	disjoint := &dataset{name: peersDisjoint, dir: filepath.Join(b.work, "peers-data", peersDisjoint), size: b.cfg.size}
	ranked := map[string]int{}
	for r := range maxNodes {
		for j := range b.cfg.files {
			rel := fmt.Sprintf("model-rank%d-shard%02d.pt", r, j)
			disjoint.rel = append(disjoint.rel, rel)
			ranked[rel] = r
		}
	}
	// The server's copies, the data while it is pushed (and the server's
	// parts beside it), every node's copy of its share (the whole step, or
	// its rank's files, as many bytes) and the spools; 10% slack.
	stepW, stepD := whole.bytes(), disjoint.bytes()
	need := (2*(stepW+stepD) + int64(maxNodes+1)*stepW) * 11 / 10
	if free, err := freeBytes(b.work); err == nil && free < need {
		return fmt.Errorf("%s has %.1f GiB free; the peers phase needs about %.1f GiB", b.work, gib(free), gib(need))
	}
	res := &peersResult{Files: b.cfg.files, FileSize: b.cfg.size, ServerCounts: b.srv.accessLog != ""}
	if b.cfg.wan != nil {
		res.Link = b.cfg.wan.String()
	}
	b.rep.Peers = res
	cases := []*peersCase{
		{name: peersWhole, prefix: "peers-" + peersWhole, ds: whole},
		{name: peersDisjoint, prefix: "peers-" + peersDisjoint, ds: disjoint, ranked: ranked},
	}
	for i, c := range cases {
		if err := b.pushPeersStep(ctx, c, 7+uint64(i)<<32); err != nil {
			return err
		}
		defer func() { _ = b.srv.removePrefix(c.prefix) }()
	}
	for _, n := range b.cfg.peerNodes {
		for _, c := range cases {
			row := peersRow{Case: c.name, Nodes: n, StepBytes: c.stepBytes(n)}
			modes := []string{modeSolo, modePeers}
			for r := -b.cfg.warmup; r < b.cfg.rounds; r++ {
				for k := range modes {
					mode := modes[(k+r+b.cfg.warmup)%len(modes)]
					run, err := b.peersOnce(ctx, c, n, mode)
					if err != nil {
						return fmt.Errorf("%s, %d nodes, %s: %w", c.name, n, mode, err)
					}
					run.Round, run.Warmup = max(r, 0), r < 0
					res.Runs = append(res.Runs, run)
					logPeersRun(run, row.StepBytes, r)
					if mode == modePeers && run.MinJoined < n-1 {
						b.rep.note("peers: %s, %d nodes, round %d: a node restored with %d of its %d peers", c.name, n, r+1, run.MinJoined, n-1)
					}
					if run.Fallbacks > 0 || run.Dropped > 0 {
						b.rep.note("peers: %s, %d nodes, round %d: %d ranges fetched from the bucket because their owner did not serve them, %d peers dropped", c.name, n, r+1, run.Fallbacks, run.Dropped)
					}
				}
			}
			row.Solo, row.Peers = summarizePeers(res.Runs, c.name, n, modeSolo), summarizePeers(res.Runs, c.name, n, modePeers)
			if row.Solo.WallS > 0 {
				row.Ratio = row.Peers.WallS / row.Solo.WallS
			}
			res.Rows = append(res.Rows, row)
		}
	}
	return nil
}

// pushPeersStep generates c's files, pushes them as one ferry step to c's
// prefix (not measured), records their BLAKE3 and deletes them.
func (b *bench) pushPeersStep(ctx context.Context, c *peersCase, seed uint64) error {
	start := time.Now()
	log.Printf("peers: generating the %s step: %d x %s", c.name, len(c.ds.rel), fmtSize(c.ds.size))
	if err := makeDataset(c.ds, seed); err != nil {
		return fmt.Errorf("generate the %s step: %w", c.name, err)
	}
	defer os.RemoveAll(c.ds.dir)
	_ = b.srv.removePrefix(c.prefix)
	if _, err := measure(ctx, b.ts.ferry().upload(c.ds.dir, c.prefix), nil, nil); err != nil {
		return fmt.Errorf("push the %s step: %w", c.name, err)
	}
	if err := b.checkUploaded(c.ds, c.prefix); err != nil {
		return fmt.Errorf("push the %s step: %w", c.name, err)
	}
	hashes, err := hashFiles(ctx, c.ds.dir, c.ds.rel)
	if err != nil {
		return err
	}
	c.hashes = hashes
	log.Printf("peers: %s step pushed to s3://%s/%s in %s", c.name, bucket, c.prefix, time.Since(start).Round(time.Second))
	return nil
}

// hashFiles returns the BLAKE3 of each file rel under root, a few at once.
func hashFiles(ctx context.Context, root string, rel []string) (map[string]string, error) {
	out := make(map[string]string, len(rel))
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(2, runtime.NumCPU()))
	for _, r := range rel {
		g.Go(func() error {
			h, _, err := uploader.HashFile(gctx, filepath.Join(root, filepath.FromSlash(r)))
			if err != nil {
				return err
			}
			mu.Lock()
			out[r] = h
			mu.Unlock()
			return nil
		})
	}
	return out, g.Wait()
}
