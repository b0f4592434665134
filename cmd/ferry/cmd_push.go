package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	"go.uber.org/zap"

	"github.com/ferrylabs/ferry/agent/detect"
	"github.com/ferrylabs/ferry/internal/ratelimit"
	"github.com/ferrylabs/ferry/internal/s3store"
	"github.com/ferrylabs/ferry/internal/units"
	"github.com/ferrylabs/ferry/manifest"
	"github.com/ferrylabs/ferry/uploader"
)

type pushOptions struct {
	remote      remoteOptions
	to          string
	step        int64
	partSize    int64
	concurrency int
	stateDir    string
	bandwidth   int64
	json        bool
	noDedup     bool
	allowEmpty  bool
	node        nodeInfo
	sources     []string
}

func newPushCommand() *cli.Command {
	return &cli.Command{
		Name:      "push",
		Usage:     "upload a checkpoint directory (or files) as one step and commit its manifest",
		ArgsUsage: "DIR | FILE...",
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "to", Usage: "destination `s3://bucket/prefix`"},
			&cli.Int64Flag{Name: "step", Value: -1, Usage: "training step this checkpoint belongs to (required)"},
			&cli.StringFlag{Name: "part-size", Value: "64MiB", EnvVars: []string{"FERRY_PART_SIZE"}, Usage: "multipart part size (raised so no object needs more than 10,000 parts)"},
			&cli.IntFlag{Name: "concurrency", Value: uploader.DefaultConcurrency, EnvVars: []string{"FERRY_CONCURRENCY"}, Usage: "upload requests in flight"},
			&cli.StringFlag{Name: "bandwidth", EnvVars: []string{"FERRY_BANDWIDTH"}, Usage: "cap the upload rate, e.g. 800MiB/s (default: unlimited)"},
			&cli.StringFlag{Name: "state-dir", EnvVars: []string{"FERRY_STATE_DIR"}, Usage: "where resume state is kept (default $XDG_STATE_HOME/ferry or ~/.local/state/ferry)"},
			&cli.BoolFlag{Name: "json", Usage: "print the result as JSON"},
			&cli.BoolFlag{Name: "no-dedup", EnvVars: []string{"FERRY_NO_DEDUP"}, Usage: "upload every file, even one unchanged since the previous committed step"},
			allowEmptyStepFlag(),
		}, append(nodeFlags(), commonFlags()...)...),
		Action: func(c *cli.Context) error {
			opts := pushOptions{
				remote:      readRemoteOptions(c),
				to:          c.String("to"),
				step:        c.Int64("step"),
				concurrency: c.Int("concurrency"),
				stateDir:    c.String("state-dir"),
				json:        c.Bool("json"),
				noDedup:     c.Bool("no-dedup"),
				allowEmpty:  c.Bool("allow-empty"),
				sources:     c.Args().Slice(),
			}
			var err error
			if opts.node, err = readNodes(c, os.Getenv); err != nil {
				return err
			}
			if opts.partSize, err = sizeFlag(c, "part-size"); err != nil {
				return err
			}
			if opts.bandwidth, err = rateFlag(c, "bandwidth"); err != nil {
				return err
			}
			return runPush(c.Context, opts, c.App.Writer, c.App.ErrWriter)
		},
	}
}

// allowEmptyStepFlag is push's and the agent's opt-in to committing a step
// with no files, which a restore would then hand the trainer as "latest".
func allowEmptyStepFlag() cli.Flag {
	return &cli.BoolFlag{Name: "allow-empty", EnvVars: []string{"FERRY_ALLOW_EMPTY_STEP"},
		Usage: "commit a step even when it has no files (a restore of it restores nothing)"}
}

// pushSummary is what push prints with --json. Files and Bytes count the
// step's files, or this node's while the step is pending.
type pushSummary struct {
	Step        int64   `json:"step"`
	Committed   bool    `json:"committed"`
	Files       int     `json:"files"`
	Bytes       int64   `json:"bytes"`
	BytesSent   int64   `json:"bytes_sent"`
	PartsSent   int64   `json:"parts_sent"`
	PartsReused int64   `json:"parts_resumed"`
	DedupFiles  int64   `json:"files_deduplicated"`
	DedupBytes  int64   `json:"bytes_deduplicated"`
	Seconds     float64 `json:"seconds"`
	Manifest    string  `json:"manifest"`
	// Multi-node pushes: this node, and whether the step still waits for
	// other nodes' parts.
	Nodes        int    `json:"nodes"`
	NodeRank     int    `json:"node_rank"`
	Pending      bool   `json:"pending,omitempty"`
	PartsPresent int    `json:"parts_present,omitempty"`
	Part         string `json:"part,omitempty"`
	// Requests counts the S3 requests made, by operation, retries included.
	Requests map[string]int64 `json:"requests"`
}

func runPush(ctx context.Context, o pushOptions, stdout, stderr io.Writer) error {
	if o.step < 0 {
		return usagef("--step is required (the training step of this checkpoint)")
	}
	if len(o.sources) == 0 {
		return usagef("push needs a checkpoint directory or files")
	}
	for _, s := range o.sources {
		if strings.HasPrefix(s, "-") {
			return usagef("flag %s must come before the checkpoint directory", s)
		}
	}
	if o.partSize < 5<<20 || o.partSize > 5<<30 {
		return usagef("--part-size %s: must be between 5 MiB and 5 GiB", units.FormatBytes(o.partSize))
	}
	if o.concurrency < 1 || o.concurrency > 1024 {
		return usagef("--concurrency %d: must be between 1 and 1024", o.concurrency)
	}
	log, err := newLogger(o.remote, stderr)
	if err != nil {
		return err
	}
	defer log.Sync() //nolint:errcheck // nothing useful to do if stderr is gone
	var counters s3store.Counters
	st, loc, err := openStore(ctx, o.remote, "to", o.to, log, o.concurrency, &counters)
	if err != nil {
		return err
	}
	tree, err := uploader.Scan(o.sources, log)
	if err != nil {
		return err
	}
	if len(tree.Files) == 0 && !o.allowEmpty {
		return fmt.Errorf("push %s: no files found, nothing committed; point at the checkpoint, or pass --allow-empty to commit an empty step", strings.Join(o.sources, " "))
	}
	stateDir := o.stateDir
	if stateDir == "" {
		stateDir = defaultStateDir()
	}
	var total int64
	for _, f := range tree.Files {
		total += f.Size
	}
	prog := newProgress(stderr, "push", total, !o.remote.Quiet && isTerminal(stderr))
	start := time.Now()
	if o.node.nodes > 1 {
		log.Info("multi-node push", zap.Int("node_rank", o.node.rank), zap.Int("nodes", o.node.nodes), zap.String("run", o.node.run), zap.String("from", o.node.source))
	}
	res, err := uploader.Push(ctx, uploader.PushOptions{
		Upload: uploader.Options{
			Store:       st,
			PartSize:    o.partSize,
			Concurrency: o.concurrency,
			Limiter:     ratelimit.New(o.bandwidth),
			Logger:      log,
			OnHashed:    prog.Add,
		},
		Location:   loc.String(),
		Prefix:     loc.Prefix,
		Step:       o.step,
		Tree:       tree,
		StateDir:   stateDir,
		Rank:       detect.RankOf,
		Nodes:      o.node.nodes,
		NodeRank:   o.node.rank,
		Run:        o.node.run,
		NoDedup:    o.noDedup,
		AllowEmpty: o.allowEmpty,
	})
	prog.Close()
	if err != nil {
		return err
	}
	sum := pushSummary{
		Step:         o.step,
		Committed:    res.Committed,
		BytesSent:    res.Stats.BytesSent,
		PartsSent:    res.Stats.PartsSent,
		PartsReused:  res.Stats.PartsResumed,
		DedupFiles:   res.Stats.DedupFiles,
		DedupBytes:   res.Stats.DedupBytes,
		Seconds:      time.Since(start).Seconds(),
		Manifest:     "s3://" + loc.Bucket + "/" + manifest.ManifestKey(loc.Prefix, o.step),
		Nodes:        o.node.nodes,
		NodeRank:     o.node.rank,
		Pending:      res.Pending,
		PartsPresent: res.PartsPresent,
		Requests:     counters.Snapshot(),
	}
	if res.Manifest != nil {
		sum.Files, sum.Bytes = len(res.Manifest.Files), res.Manifest.TotalBytes()
	} else if res.Part != nil {
		for _, f := range res.Part.Files {
			sum.Files++
			sum.Bytes += f.Size
		}
	}
	if o.node.nodes > 1 {
		sum.Part = "s3://" + loc.Bucket + "/" + manifest.PartKey(loc.Prefix, manifest.PartSet{Step: o.step, Nodes: o.node.nodes, Run: o.node.run}, o.node.rank)
	}
	log.Info("push finished", zap.Int64("step", sum.Step), zap.Bool("committed", sum.Committed), zap.Bool("pending", sum.Pending),
		zap.Int64("bytes_sent", sum.BytesSent), zap.Int64("bytes_deduplicated", sum.DedupBytes))
	if o.json {
		return printJSON(stdout, sum)
	}
	if res.Pending {
		fmt.Fprintf(stdout, "node %d of %d: step %d's files on this node are durable at %s (%d of %d nodes done); the last node to finish commits the step\n",
			o.node.rank, o.node.nodes, o.step, loc, res.PartsPresent, o.node.nodes)
		return nil
	}
	if !res.Committed {
		fmt.Fprintf(stdout, "step %d is already committed at %s with identical content; nothing uploaded\n", o.step, loc)
		return nil
	}
	fmt.Fprintf(stdout, "committed step %d to %s: %d files, %s in %s (%s)", o.step, loc, sum.Files,
		units.FormatBytes(sum.Bytes), time.Since(start).Round(time.Millisecond), units.FormatRate(sum.Bytes, time.Since(start)))
	if sum.DedupFiles > 0 {
		fmt.Fprintf(stdout, "; %d unchanged files (%s) referenced from the previous step", sum.DedupFiles, units.FormatBytes(sum.DedupBytes))
	}
	fmt.Fprintln(stdout)
	return nil
}
