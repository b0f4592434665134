package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	"go.uber.org/zap"

	"github.com/ferrylabs/ferry/agent/detect"
	"github.com/ferrylabs/ferry/internal/ratelimit"
	"github.com/ferrylabs/ferry/internal/s3store"
	"github.com/ferrylabs/ferry/internal/store"
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
	noPack      bool
	allowEmpty  bool
	unsafeCond  bool
	node        nodeInfo
	sources     []string
}

func newPushCommand() *cli.Command {
	return &cli.Command{
		Name:      "push",
		Usage:     "upload a checkpoint directory (or files) as one step and commit its manifest",
		ArgsUsage: "DIR | FILE...",
		Description: commandDoc{
			about: "Uploads a directory (or files) as step --step of the run at --to and commits its manifest last, " +
				"create-only: the step exists remotely once every byte is durable, or not at all. Files under 4 MiB are packed " +
				"(--pack), a file unchanged since the previous step is referenced instead of sent, a killed push started " +
				"again with the same arguments resumes, and pushing a step again with the same content sends nothing. A DIR's " +
				"contents are recorded without DIR's own name (push /nvme/ckpt/step-1000 records model.bin, not " +
				"step-1000/model.bin, and restore --to /x places it at /x/model.bin), unlike the agent, which keeps each step's " +
				"folder name; the line printed says so.",
			env: "FERRY_TO, FERRY_CONCURRENCY, FERRY_BANDWIDTH, FERRY_PART_SIZE and FERRY_PACK mean here what they mean for " +
				"`ferry agent` (the location written, requests in flight, the upload rate cap): a job environment set for the agent " +
				"tunes push the same way.",
			examples: []string{"ferry push --to s3://my-bucket/run --step 1000 /nvme/ckpt/step-1000"},
			exits:    []string{"0 the step is committed (or was already, with the same content)", exit1, exit2},
		}.String(),
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "to", EnvVars: []string{"FERRY_TO"}, Usage: "destination `s3://bucket/prefix` or file:///folder (required)"},
			&cli.Int64Flag{Name: "step", Value: -1, Usage: "training step this checkpoint belongs to (required)"},
			&cli.StringFlag{Name: "part-size", Value: "64MiB", EnvVars: []string{"FERRY_PART_SIZE"}, Usage: "multipart part size (raised so no object needs more than 10,000 parts)"},
			&cli.IntFlag{Name: "concurrency", Value: uploader.DefaultConcurrency, EnvVars: []string{"FERRY_CONCURRENCY"}, Usage: "most upload requests in flight; within it, requests are sized by bytes (16 parts in flight), so small files get many and big parts few"},
			&cli.StringFlag{Name: "bandwidth", EnvVars: []string{"FERRY_BANDWIDTH"}, Usage: "cap the upload rate, e.g. 800MiB/s (default: unlimited)"},
			&cli.StringFlag{Name: "state-dir", EnvVars: []string{"FERRY_STATE_DIR"}, Usage: "where resume state is kept (default $XDG_STATE_HOME/ferry or ~/.local/state/ferry)"},
			&cli.BoolFlag{Name: "json", Usage: "print the result as JSON"},
			&cli.BoolFlag{Name: "no-dedup", EnvVars: []string{"FERRY_NO_DEDUP"}, Usage: "upload every file, even one unchanged since the previous committed step"},
			packFlag(),
			allowEmptyStepFlag(),
			conditionalWritesFlag(),
		}, append(nodeFlags(), commonFlags()...)...),
		Action: func(c *cli.Context) error {
			if err := checkStepFlag(c); err != nil {
				return err
			}
			opts := pushOptions{
				remote:      readRemoteOptions(c),
				to:          c.String("to"),
				step:        c.Int64("step"),
				concurrency: c.Int("concurrency"),
				stateDir:    c.String("state-dir"),
				json:        c.Bool("json"),
				noDedup:     c.Bool("no-dedup"),
				noPack:      !c.Bool("pack"),
				allowEmpty:  c.Bool("allow-empty"),
				unsafeCond:  c.Bool(unsafeConditionalFlag),
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

// packFlag is push's and the agent's --pack.
func packFlag() cli.Flag {
	return &cli.BoolFlag{Name: "pack", Value: true, EnvVars: []string{"FERRY_PACK"},
		Usage: "send files under 4 MiB packed into shared objects of up to 16 MiB, one PUT (and one GET to restore) for many; false: one plain S3 object per file"}
}

// checkStepFlag refuses a negative --step given explicitly (-1 is the
// flag's "not given").
func checkStepFlag(c *cli.Context) error {
	if c.IsSet("step") && c.Int64("step") < 0 {
		return usagef("--step %d: a step is a number from 0 up", c.Int64("step"))
	}
	return nil
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
	Nodes    int  `json:"nodes"`
	NodeRank int  `json:"node_rank"`
	Pending  bool `json:"pending,omitempty"`
	// CommittedByPeer: another node merged the parts and committed the
	// step; this node's part is in it.
	CommittedByPeer bool `json:"committed_by_peer,omitempty"`
	// PartsPresent counts the parts found before the first missing node,
	// WaitingFor is that node (pending pushes only).
	PartsPresent int    `json:"parts_present,omitempty"`
	WaitingFor   *int   `json:"waiting_for_node,omitempty"`
	Part         string `json:"part,omitempty"`
	// Skipped lists what the push left out of the directory and why
	// (links leaving it, special files), as its warnings said.
	Skipped []string `json:"skipped,omitempty"`
	// Requests counts the S3 requests made, by operation, retries included.
	Requests map[string]int64 `json:"requests"`
	// Error is set when the push failed (the exit code is not 0).
	Error string `json:"error,omitempty"`

	loc string // the destination, for the text output
}

func runPush(ctx context.Context, o pushOptions, stdout, stderr io.Writer) error {
	sum, res, err := push(ctx, o, stderr)
	if o.json {
		return printResultJSON(stdout, &sum, err)
	}
	if err != nil {
		return err
	}
	printPushResult(stdout, o, sum, res)
	return nil
}

// validate checks the options that need no request.
func (o pushOptions) validate() error {
	switch {
	case o.step < 0:
		return usagef("--step is required (the training step of this checkpoint)")
	case len(o.sources) == 0:
		return usagef("push needs a checkpoint directory or files")
	case o.partSize < store.MinPartSize || o.partSize > store.MaxPartSize:
		return usagef("--part-size %s: must be between 5 MiB and 5 GiB", units.FormatBytes(o.partSize))
	case o.concurrency < 1 || o.concurrency > 1024:
		return usagef("--concurrency %d: must be between 1 and 1024", o.concurrency)
	}
	// A mistyped folder is bad usage, said before any request is made (a
	// wrong endpoint would otherwise hide it behind a minute of retries).
	for _, src := range o.sources {
		if _, err := os.Stat(src); errors.Is(err, os.ErrNotExist) {
			return usagef("push source %s: no such file or directory; name the checkpoint directory or its files", src)
		}
	}
	return nil
}

// push scans the sources and pushes them as one step.
func push(ctx context.Context, o pushOptions, stderr io.Writer) (pushSummary, uploader.PushResult, error) {
	sum := pushSummary{Step: o.step, Nodes: o.node.nodes, NodeRank: o.node.rank}
	if err := o.validate(); err != nil {
		return sum, uploader.PushResult{}, err
	}
	log, err := newLogger(o.remote, stderr)
	if err != nil {
		return sum, uploader.PushResult{}, err
	}
	defer log.Sync() //nolint:errcheck // nothing useful to do if stderr is gone
	var counters s3store.Counters
	defer func() { sum.Requests = counters.Snapshot() }()
	st, loc, err := openStore(ctx, o.remote, "to", o.to, log, o.concurrency, &counters)
	if err != nil {
		return sum, uploader.PushResult{}, err
	}
	s, skipped, err := detect.Gather(o.sources, log)
	if err != nil {
		return sum, uploader.PushResult{}, err
	}
	sum.Skipped = skipped
	s.Number = o.step
	if len(s.Files) == 0 && !o.allowEmpty {
		return sum, uploader.PushResult{}, fmt.Errorf("push %s: no files found, nothing committed; point at the checkpoint, or pass --allow-empty to commit an empty step", strings.Join(o.sources, " "))
	}
	if err := proveConditionalWrites(ctx, st, o.remote, loc, stateBase(o.stateDir), o.unsafeCond, o.node.nodes, log); err != nil {
		return sum, uploader.PushResult{}, fmt.Errorf("push step %d: %w", o.step, err)
	}
	if o.node.nodes > 1 {
		log.Info("multi-node push", zap.Int("node_rank", o.node.rank), zap.Int("nodes", o.node.nodes), zap.String("run", o.node.run), zap.String("from", o.node.source))
	}
	start := time.Now()
	res, err := pushStep(ctx, o, st, loc, s, log, stderr)
	sum.fill(o, loc, res, time.Since(start))
	sum.Requests = counters.Snapshot()
	if errors.Is(err, context.Canceled) {
		err = interruptedError{hint: "run the same command again to resume; parts already sent are kept"}
	}
	if err == nil {
		log.Info("push finished", zap.Int64("step", sum.Step), zap.Bool("committed", sum.Committed), zap.Bool("pending", sum.Pending),
			zap.Int64("bytes_sent", sum.BytesSent), zap.Int64("bytes_deduplicated", sum.DedupBytes))
	}
	return sum, res, err
}

// pushStep runs the uploader with a progress display of the bytes the
// server holds.
func pushStep(ctx context.Context, o pushOptions, st store.Store, loc manifest.Location, s detect.Step, log *zap.Logger, stderr io.Writer) (uploader.PushResult, error) {
	prog := newProgress(stderr, "push", s.TotalBytes(), !o.remote.Quiet && isTerminal(stderr))
	defer prog.Close()
	stateDir := o.stateDir
	if stateDir == "" {
		stateDir = defaultStateDir()
	}
	// --bandwidth caps what the push sends.
	dest := uploader.Destination{Store: ratelimit.Uploads(st, ratelimit.New(o.bandwidth)), Location: loc.String(), Prefix: loc.Prefix, StateDir: stateDir,
		Nodes: o.node.nodes, NodeRank: o.node.rank, Run: o.node.run, Logger: log}
	return dest.Push(ctx, s, uploader.PushOptions{
		Upload:   uploader.Options{PartSize: o.partSize, Concurrency: o.concurrency, NoPack: o.noPack},
		Progress: durableBar{bar: prog},
		NoDedup:  o.noDedup, AllowEmpty: o.allowEmpty,
	})
}

// durableBar shows on the push's display the bytes the server holds.
type durableBar struct {
	uploader.NoProgress
	bar *progress
}

// Durable implements uploader.Progress.
func (d durableBar) Durable(n int64) { d.bar.Add(n) }

// fill records what the push did.
func (sum *pushSummary) fill(o pushOptions, loc manifest.Location, res uploader.PushResult, took time.Duration) {
	sum.Committed, sum.Pending, sum.PartsPresent = res.Committed, res.Pending, res.PartsPresent
	sum.CommittedByPeer = res.ByPeer
	if res.Pending && res.FirstMissing >= 0 {
		sum.WaitingFor = &res.FirstMissing
	}
	sum.BytesSent, sum.PartsSent, sum.PartsReused = res.Stats.BytesSent, res.Stats.PartsSent, res.Stats.PartsResumed
	sum.DedupFiles, sum.DedupBytes = res.Stats.DedupFiles, res.Stats.DedupBytes
	sum.Seconds = took.Seconds()
	sum.loc = loc.String()
	sum.Manifest = loc.URL(manifest.ManifestKey(loc.Prefix, o.step))
	if res.Manifest != nil {
		sum.Files, sum.Bytes = len(res.Manifest.Files), res.Manifest.TotalBytes()
	} else if res.Part != nil {
		for _, f := range res.Part.Files {
			sum.Files++
			sum.Bytes += f.Size
		}
	}
	if o.node.nodes > 1 {
		sum.Part = loc.URL(manifest.PartKey(loc.Prefix, manifest.PartSet{Step: o.step, Nodes: o.node.nodes, Run: o.node.run}, o.node.rank))
	}
}

// printPushResult prints the one line a successful push ends with.
func printPushResult(stdout io.Writer, o pushOptions, sum pushSummary, res uploader.PushResult) {
	switch {
	case res.Pending:
		fmt.Fprintf(stdout, "node %d of %d: step %d's files on this node are durable at %s (node %d's part is not there yet); the last node to finish commits the step\n",
			o.node.rank, o.node.nodes, o.step, sum.loc, res.FirstMissing)
		return
	case res.ByPeer:
		fmt.Fprintf(stdout, "node %d of %d: committed step %d to %s with every node's part (another node wrote the manifest): this node's %d files, %s\n",
			o.node.rank, o.node.nodes, o.step, sum.loc, sum.Files, units.FormatBytes(sum.Bytes))
		return
	case !res.Committed:
		fmt.Fprintf(stdout, "step %d is already committed at %s with identical content; nothing uploaded\n", o.step, sum.loc)
		return
	}
	took := time.Duration(sum.Seconds * float64(time.Second))
	fmt.Fprintf(stdout, "committed step %d to %s: %d files, %s in %s (%s)", o.step, sum.loc, sum.Files,
		units.FormatBytes(sum.Bytes), took.Round(time.Millisecond), units.FormatRate(sum.Bytes, took))
	if sum.DedupFiles > 0 {
		fmt.Fprintf(stdout, "; %d unchanged files (%s) referenced from the previous step", sum.DedupFiles, units.FormatBytes(sum.DedupBytes))
	}
	fmt.Fprintln(stdout)
	if len(o.sources) == 1 {
		if fi, err := os.Stat(o.sources[0]); err == nil && fi.IsDir() {
			fmt.Fprintf(stdout, "paths are relative to %s, without its name: `ferry restore --to DIR` places them in DIR as they are in %s\n",
				o.sources[0], filepath.Base(filepath.Clean(o.sources[0])))
		}
	}
}
