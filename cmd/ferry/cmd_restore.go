package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/urfave/cli/v2"
	"go.uber.org/zap"

	"github.com/ferrylabs/ferry/internal/peer"
	"github.com/ferrylabs/ferry/internal/r2cost"
	"github.com/ferrylabs/ferry/internal/remote"
	"github.com/ferrylabs/ferry/internal/s3store"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/internal/units"
	"github.com/ferrylabs/ferry/manifest"
	"github.com/ferrylabs/ferry/restore"
)

type restoreOptions struct {
	remote      remoteOptions
	from, to    string
	step        int64
	allowEmpty  bool
	concurrency int
	directIO    bool
	fsync       bool
	json        bool
	// lowSpeedLimit (bytes/s, 0: off) over lowSpeedTime cuts a slow GET.
	lowSpeedLimit int64
	lowSpeedTime  time.Duration
	// ranks, or nodes and nodeRank, select what to restore (0 nodes: all).
	ranks           string
	nodes, nodeRank int
	// paths selects files by their manifest paths (--include, --exclude).
	paths *restore.PathFilter
	// dryRun plans the restore and fetches no data (--dry-run).
	dryRun bool
	// fallback restores the newest restorable step when the latest is
	// damaged (--on-damaged previous).
	fallback bool
	// peers, when set, restores together with other nodes (--peers).
	peers *peerOptions
	// setAsideNewer renames step folders newer than the restored step
	// (restore_newer.go).
	setAsideNewer bool
	// runID (set: runIDSet) and barrierTimeout configure the restore
	// barrier (restore_barrier.go); a zero timeout turns it off.
	runID          string
	runIDSet       bool
	barrierTimeout time.Duration
}

func newRestoreCommand() *cli.Command {
	return &cli.Command{
		Name:  "restore",
		Usage: "download and verify a committed checkpoint step into a directory",
		Description: commandDoc{
			about: "Restores the latest committed step (or --step N) of the run at --from into --to: the manifest is checked " +
				"as untrusted input, files are fetched with parallel ranged GETs, each file's size and BLAKE3 are checked as the " +
				"bytes arrive, and the step is placed as a whole once every file is verified (its marker last); a failed restore " +
				"leaves --to as it was. Files already correct are kept, and verified files a killed restore left staged are " +
				"used, so an interrupted restore resumes; files the manifest does not name are left alone. --to is created if missing, also when " +
				"nothing is committed and --allow-empty lets a first run start fresh. On one node of several (--nodes and --node-rank, " +
				"FERRY_NODES and FERRY_NODE_RANK, or an srun step) with a run identity (--run-id, or SLURM's job ID and restart count), " +
				"a restore of the latest step places it only once every node has verified its own files of it (the restore barrier, " +
				"check-ins under PREFIX/checkins/): a step one node finds damaged is placed by none. Without a run identity, or on one " +
				"node, there is no barrier.",
			env: "FERRY_FROM is the location every command that reads a run reads (restore, list, show, verify, prune, copy's " +
				"source); FERRY_CONCURRENCY (requests in flight) is shared with push and the agent, with the same default.",
			examples: []string{
				"ferry restore --from s3://my-bucket/run --to /nvme/ckpt --allow-empty --on-damaged previous --set-aside-newer",
				"ferry restore --from s3://my-bucket/run --to /nvme/ckpt --step 1000 --exclude '*optim*'",
			},
			exits: []string{"0 restored (or, with --allow-empty, nothing is committed yet and --to exists, empty); with " +
				"--on-damaged previous, possibly an older step than the latest: the log warns and --json's skipped names each step passed over and why",
				exit1 + "; a damaged step (the latest, or --step N; with --on-damaged previous, every committed step) is one: " +
					"nothing of it is placed, and --json's skipped names it; so is a barrier that timed out (nothing placed, the " +
					"nodes that never checked in named)", exit2,
				"3 nothing is committed at --from (without --allow-empty), or --step N is not committed"},
		}.String(),
		Flags: restoreFlags(),
		Action: func(c *cli.Context) error {
			o, err := readRestoreOptions(c)
			if err != nil {
				return err
			}
			return runRestore(c.Context, o, c.App.Writer, c.App.ErrWriter)
		},
	}
}

// restoreSummary is what restore prints with --json.
type restoreSummary struct {
	Step            int64   `json:"step"`
	Empty           bool    `json:"empty,omitempty"`
	Files           int     `json:"files"`
	Kept            int     `json:"kept"`
	Downloaded      int     `json:"downloaded"`
	Direct          int     `json:"direct_io"`
	Bytes           int64   `json:"bytes"`
	BytesDownloaded int64   `json:"bytes_downloaded"`
	Seconds         float64 `json:"seconds"`
	// Selection says which files were selected with --ranks or --nodes.
	Selection string `json:"selection,omitempty"`
	// Requests counts the S3 requests made, by operation, retries included.
	Requests map[string]int64 `json:"requests"`
	// Error is set when the restore failed (the exit code is not 0).
	Error string `json:"error,omitempty"`
	// DryRun, with --dry-run, is what the restore would do; nothing was
	// fetched or written.
	DryRun *dryRunSummary `json:"dry_run,omitempty"`
	// Skipped are the damaged steps not restored, newest first: with
	// --on-damaged previous those passed over to reach Step (exit 0),
	// otherwise the one that failed the restore (exit 1).
	Skipped []restore.Skipped `json:"skipped,omitempty"`
	// Peers, with --peers, counts the bytes by where they came from.
	Peers *peer.Stats `json:"peers,omitempty"`
	// NewerLocal are folders of the target named as steps newer than the
	// one restored, which this restore did not place (restore_newer.go).
	NewerLocal []newerStep `json:"newer_local,omitempty"`
	// Dangling are the links placed whose target neither the step nor
	// the target folder holds ("path -> target").
	Dangling []string `json:"dangling_links,omitempty"`
	// Barrier is what the restore barrier did (restore_barrier.go).
	Barrier *barrierSummary `json:"barrier,omitempty"`
	// NewerDataStep is a step above the latest committed one that has
	// objects but no manifest (an upload in flight or left unfinished, or
	// a deleted manifest).
	NewerDataStep int64 `json:"newer_data_step,omitempty"`
}

func runRestore(ctx context.Context, o restoreOptions, stdout, stderr io.Writer) error {
	sum, err := restoreStep(ctx, &o, stderr)
	if o.json {
		return printResultJSON(stdout, &sum, err)
	}
	if err != nil {
		return err
	}
	printSkipped(stdout, sum.Skipped)
	printNewerData(stdout, sum.NewerDataStep)
	if sum.Empty {
		fmt.Fprintf(stdout, "no committed checkpoint at %s; starting fresh (--allow-empty)\n", o.from)
		return nil
	}
	if sum.DryRun != nil {
		printDryRun(stdout, &o, sum)
		return nil
	}
	fmt.Fprintf(stdout, "restored step %d from %s into %s: %d files, %s (%d kept, %d downloaded) in %s, all hashes verified\n",
		sum.Step, o.from, o.to, sum.Files, units.FormatBytes(sum.Bytes), sum.Kept, sum.Downloaded,
		time.Duration(sum.Seconds*float64(time.Second)).Round(time.Millisecond))
	if sum.Selection != "" {
		fmt.Fprintf(stdout, "selected: %s\n", sum.Selection)
	}
	printBarrier(stdout, sum.Barrier)
	printNewer(stdout, sum.Step, sum.NewerLocal)
	for _, d := range sum.Dangling {
		fmt.Fprintf(stdout, "warning: link %s dangles: step %d does not hold its target and %s did not; restore that step too, or save the file in this one\n", d, sum.Step, o.to)
	}
	if p := sum.Peers; p != nil {
		fmt.Fprintf(stdout, "with %d peers: %s from the bucket (%d ranges that a peer did not serve), %s from peers, %s served to them\n",
			p.Joined, units.FormatBytes(p.BucketBytes), p.Fallbacks, units.FormatBytes(p.PeerBytes), units.FormatBytes(p.ServedBytes))
		for addr, why := range p.Dropped {
			fmt.Fprintf(stdout, "dropped peer %s: %s\n", addr, why)
		}
	}
	return nil
}

// validate checks the options that need no request and parses --ranks.
func (o *restoreOptions) validate() (restore.RankSet, error) {
	switch {
	case o.to == "":
		return restore.RankSet{}, usagef("--to is required (the directory to restore into)")
	case o.concurrency < 1 || o.concurrency > 1024:
		return restore.RankSet{}, usagef("--concurrency %d: must be between 1 and 1024", o.concurrency)
	case o.lowSpeedTime <= 0:
		return restore.RankSet{}, usagef("--low-speed-time %v: must be positive", o.lowSpeedTime)
	case o.barrierTimeout < 0:
		return restore.RankSet{}, usagef("--barrier-timeout %v: must not be negative (0: no barrier)", o.barrierTimeout)
	case (o.nodes != 0 || o.nodeRank >= 0) && (o.nodes < 1 || o.nodeRank < 0 || o.nodeRank >= o.nodes):
		return restore.RankSet{}, usagef("--nodes %d --node-rank %d: give both, with 0 <= node rank < nodes", o.nodes, o.nodeRank)
	case o.ranks != "":
		// With --ranks, --nodes and --node-rank only name the node for
		// the barrier: the ranks select the files.
		ranks, err := restore.ParseRanks(o.ranks)
		if err != nil {
			return restore.RankSet{}, usagef("--ranks: %v", err)
		}
		return ranks, nil
	}
	return restore.RankSet{}, nil
}

// restoreStep restores the step o names and describes what it did.
func restoreStep(ctx context.Context, o *restoreOptions, stderr io.Writer) (restoreSummary, error) {
	sum := restoreSummary{Step: o.step}
	ranks, err := o.validate()
	if err != nil {
		return sum, err
	}
	barrier, barrierSum, err := o.barrier(os.Getenv)
	if err != nil {
		return sum, err
	}
	log, err := newLogger(o.remote, stderr)
	if err != nil {
		return sum, err
	}
	defer log.Sync() //nolint:errcheck // nothing useful to do if stderr is gone
	var counters s3store.Counters
	st, loc, err := openStore(ctx, o.remote, "from", o.from, log, o.concurrency, &counters)
	if err != nil {
		return sum, err
	}
	o.from = loc.String()
	warnOthersFolder(o.to, log)
	start := time.Now()
	ropts, bar := o.restoreOptions(st, loc, log, stderr)
	ropts.Barrier, sum.Barrier = barrier, barrierSum
	o.warnNoBarrier(sum.Barrier, log)
	if o.ranks != "" {
		ropts.Ranks = ranks.Filter()
		sum.Selection = "ranks " + ranks.String() + " and shared files"
	}
	var node *peer.Node
	if o.peers != nil && !o.dryRun {
		var cleanup func()
		if node, cleanup, err = o.peers.start(ctx, st, loc, o.to, o.concurrency, log); err != nil {
			return sum, err
		}
		defer cleanup()
		if node != nil {
			defer node.Close()
			ropts.Peers = node.Join
		}
	}
	res, err := restore.Restore(ctx, ropts)
	bar.close()
	if node != nil {
		if err == nil {
			node.Finish(ctx)
		}
		stats := node.Stats()
		sum.Peers = &stats
	}
	sum.Requests = counters.Snapshot()
	sum.Skipped, sum.NewerDataStep = res.Skipped, res.NewerData
	if sum.Barrier != nil {
		sum.Barrier.Steps = res.Barrier
	}
	switch {
	case errors.Is(err, remote.ErrNoCheckpoint) && o.allowEmpty && o.step < 0:
		sum.Step, sum.Empty = -1, true
		// A first run's --to exists afterwards as after any restore, so
		// that an agent started next on it has a folder to watch.
		if !o.dryRun {
			if err := os.MkdirAll(o.to, 0o755); err != nil {
				return sum, fmt.Errorf("create --to %s: %w", o.to, err)
			}
		}
		return sum, nil
	case errors.Is(err, remote.ErrNoCheckpoint):
		return sum, missingStep(ctx, st, loc, o.step, err)
	case errors.Is(err, context.Canceled):
		return sum, interruptedError{hint: "run the same command again to resume; files already verified are kept"}
	case err != nil:
		return sum, fmt.Errorf("restore from %s: %w", loc, err)
	}
	err = o.summarize(&sum, res, time.Since(start), log)
	return sum, err
}

// summarize fills sum from a restore's result, and names (or sets aside)
// step folders newer than the one restored.
func (o *restoreOptions) summarize(sum *restoreSummary, res restore.Result, took time.Duration, log *zap.Logger) error {
	sum.Step, sum.Files, sum.Kept, sum.Downloaded, sum.Direct = res.Step, res.Files, res.Kept, res.Downloaded, res.Direct
	sum.Dangling = res.Dangling
	if res.Plan != nil {
		sum.DryRun = &dryRunSummary{Plan: *res.Plan, CostUSD: r2cost.Requests(sum.Requests) + r2cost.Reads(res.Plan.GETs)}
	}
	sum.Bytes, sum.BytesDownloaded, sum.Seconds = res.Bytes, res.BytesDownloaded, took.Seconds()
	if res.Selection != nil {
		sum.Selection = fmt.Sprintf("node %d of %d: %s", o.nodeRank, o.nodes, res.Selection)
	}
	log.Info("restore finished", zap.Int64("step", sum.Step), zap.Int("files", sum.Files), zap.Int64("bytes_downloaded", sum.BytesDownloaded))
	if sum.DryRun != nil {
		return nil
	}
	newer, err := handleNewer(o.to, sum.Step, o.setAsideNewer, log)
	sum.NewerLocal = newer
	return err
}

// lazyBar is the restore's progress display: the total is known only once
// the manifest is read, so it starts on the first progress report.
type lazyBar struct {
	mu     sync.Mutex
	bar    *progress
	w      io.Writer
	enable bool
}

func (b *lazyBar) report(done, total int64) {
	if !b.enable {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.bar == nil {
		b.bar = newProgress(b.w, "restore", total, true)
	}
	b.bar.done.Store(done)
}

func (b *lazyBar) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.bar != nil {
		b.bar.Close()
	}
}

// restoreOptions builds the library's options (without the rank filter).
func (o *restoreOptions) restoreOptions(st store.Store, loc manifest.Location, log *zap.Logger, stderr io.Writer) (restore.Options, *lazyBar) {
	bar := &lazyBar{w: stderr, enable: !o.remote.Quiet && isTerminal(stderr)}
	limit := o.lowSpeedLimit
	if limit == 0 {
		limit = -1 // restore.Options: negative disables the guard
	}
	ropts := restore.Options{
		Store: st, Prefix: loc.Prefix, Dir: o.to, Step: o.step, Concurrency: o.concurrency,
		DirectIO: o.directIO, Fsync: o.fsync, Logger: log,
		LowSpeedLimit: limit, LowSpeedTime: o.lowSpeedTime, Progress: bar.report,
		Paths: o.paths, AllowNoMatch: o.allowEmpty, PlanOnly: o.dryRun,
		Fallback: o.fallback, RecordBy: recordBy("restore"), NoRecord: o.dryRun,
	}
	if o.nodes > 0 && o.ranks == "" {
		ropts.Nodes, ropts.NodeRank = o.nodes, o.nodeRank
	}
	return ropts, bar
}

// recordBy names this node and command in a damage record.
func recordBy(cmd string) string {
	h, _ := os.Hostname()
	return h + " (ferry " + cmd + ")"
}
