package main

import (
	"github.com/urfave/cli/v2"

	"github.com/ferrylabs/ferry/restore"
)

// restoreFlags are `ferry restore`'s flags, then the peers' and the
// common ones.
func restoreFlags() []cli.Flag {
	return append([]cli.Flag{
		&cli.StringFlag{Name: "from", EnvVars: []string{"FERRY_FROM"}, Usage: "checkpoint location `s3://bucket/prefix` or file:///folder to read (required)"},
		&cli.StringFlag{Name: "to", Usage: "target `DIR` (required; created if missing, also when nothing is committed)"},
		&cli.Int64Flag{Name: "step", Value: -1, Usage: "step to restore (default: the latest committed)"},
		&cli.BoolFlag{Name: "allow-empty", Usage: "exit 0 when nothing is committed yet, so a job can start fresh; with --include, let a pattern match no file"},
		&cli.IntFlag{Name: "concurrency", Value: restore.DefaultConcurrency, EnvVars: []string{"FERRY_CONCURRENCY"}, Usage: "most ranged GETs in flight; within it, GETs are sized by bytes (16 ranges in flight), so small files get many and big files few"},
		&cli.BoolFlag{Name: "fsync", EnvVars: []string{"FERRY_FSYNC"}, Usage: "make every restored file durable (fsync) before exiting; without it files are still verified before their rename and re-verified by the next restore"},
		&cli.BoolFlag{Name: "direct-io", EnvVars: []string{"FERRY_DIRECT_IO"}, Usage: "write with direct I/O: less CPU, but the trainer then reads the files back from disk instead of the page cache"},
		// The default since direct I/O became opt-in; kept so scripts
		// that pass it keep working.
		&cli.BoolFlag{Name: "page-cache", EnvVars: []string{"FERRY_PAGE_CACHE"}, Hidden: true},
		&cli.StringFlag{Name: "on-damaged", Value: onDamagedFail, EnvVars: []string{"FERRY_ON_DAMAGED"}, Usage: "when the latest step is damaged (an object missing, bytes not matching after a second download, a manifest that does not validate, or recorded damaged in the bucket): fail (exit 1), or previous: restore the newest restorable committed step, warning which steps were skipped and why (recommended for job entrypoints)"},
		&cli.BoolFlag{Name: "set-aside-newer", EnvVars: []string{"FERRY_SET_ASIDE_NEWER"}, Usage: "rename folders of --to named as a step newer than the one restored (a torn or uncommitted save the trainer would resume from) to NAME.ferry-set-aside-TIME; without it restore only warns. Nothing is deleted"},
		&cli.BoolFlag{Name: "json", Usage: "print the result as JSON"},
		&cli.BoolFlag{Name: "dry-run", Usage: "print what the restore would do (files to download, files in place it would re-verify, bytes, requests and their price at R2's rates) and fetch no data"},
		&cli.StringFlag{Name: "low-speed-limit", Value: "16KiB/s", EnvVars: []string{"FERRY_LOW_SPEED_LIMIT"}, Usage: "cut a GET whose body delivers less than this `RATE` for --low-speed-time and fetch the range again (0: never)"},
		&cli.DurationFlag{Name: "low-speed-time", Value: restore.DefaultLowSpeedTime, EnvVars: []string{"FERRY_LOW_SPEED_TIME"}, Usage: "the window of --low-speed-limit"},
		&cli.StringFlag{Name: "ranks", Usage: "restore only these ranks' files (and files without a rank), e.g. 0-3,8 (default: every rank)"},
		&cli.StringSliceFlag{Name: "include", Usage: "restore only the files whose manifest path matches `PATTERN` (repeatable): * ? [..] within a name, ** across folders, a name without a slash at any depth (*.safetensors), a folder with everything below it (global_step100); links come with their targets (default: every file)"},
		&cli.StringSliceFlag{Name: "exclude", Usage: "leave out the files (and links) whose manifest path matches `PATTERN` (repeatable; syntax as --include), e.g. '*optim_states*' (default: none)"},
		&cli.IntFlag{Name: "nodes", Usage: "with --node-rank: restore what one node of a job of this many nodes needs, and with --run-id wait at the restore barrier; with --ranks only the latter (0: every file; the barrier's node count is then FERRY_NODES, else an srun step's SLURM_STEP_NUM_NODES, else torchrun's)"},
		&cli.IntFlag{Name: "node-rank", Value: -1, Usage: "this node's rank in the new job, 0..nodes-1 (required with --nodes)"},
		&cli.StringFlag{Name: "run-id", EnvVars: []string{"FERRY_RUN_ID"}, Usage: "identity of this start of the job, the same on every node and new at every restart: a restore of the latest step by one node of several then places it only once every node has verified its own files of it (the restore barrier), so that every node starts from the same step (default: SLURM_JOB_ID.SLURM_RESTART_COUNT, else none: no barrier)"},
		&cli.DurationFlag{Name: "barrier-timeout", Value: restore.DefaultBarrierTimeout, EnvVars: []string{"FERRY_BARRIER_TIMEOUT"}, Usage: "how long the restore barrier waits for the other nodes to verify the step before failing (exit 1, nothing placed, the missing nodes named): keep it above the time the slowest node's restore may take beyond the fastest's; 0: no barrier"},
	}, append(peerFlags(), commonFlags()...)...)
}

// readRestoreOptions converts restore's flags into its options once; a
// bad flag is a usage error before anything is fetched.
func readRestoreOptions(c *cli.Context) (restoreOptions, error) {
	if c.Args().Len() > 0 {
		return restoreOptions{}, usagef("restore takes no arguments (got %q); use --to DIR", c.Args().First())
	}
	if err := checkStepFlag(c); err != nil {
		return restoreOptions{}, err
	}
	limit, err := rateFlag(c, "low-speed-limit")
	if err != nil {
		return restoreOptions{}, err
	}
	paths, err := pathFlags(c)
	if err != nil {
		return restoreOptions{}, err
	}
	peers, err := readPeerOptions(c)
	if err != nil {
		return restoreOptions{}, err
	}
	fallback, err := onDamagedFlag(c)
	if err != nil {
		return restoreOptions{}, err
	}
	return restoreOptions{
		paths:          paths,
		peers:          peers,
		dryRun:         c.Bool("dry-run"),
		fallback:       fallback,
		lowSpeedLimit:  limit,
		lowSpeedTime:   c.Duration("low-speed-time"),
		remote:         readRemoteOptions(c),
		from:           c.String("from"),
		to:             c.String("to"),
		step:           c.Int64("step"),
		allowEmpty:     c.Bool("allow-empty"),
		concurrency:    c.Int("concurrency"),
		directIO:       c.Bool("direct-io"),
		fsync:          c.Bool("fsync"),
		json:           c.Bool("json"),
		ranks:          c.String("ranks"),
		nodes:          c.Int("nodes"),
		nodeRank:       c.Int("node-rank"),
		setAsideNewer:  c.Bool("set-aside-newer"),
		runID:          c.String("run-id"),
		runIDSet:       c.IsSet("run-id"),
		barrierTimeout: c.Duration("barrier-timeout"),
	}, nil
}

// pathFlags compiles --include and --exclude (nil when neither is given),
// so a bad pattern is a usage error before anything is fetched.
func pathFlags(c *cli.Context) (*restore.PathFilter, error) {
	inc, exc := c.StringSlice("include"), c.StringSlice("exclude")
	if len(inc)+len(exc) == 0 {
		return nil, nil
	}
	f, err := restore.NewPathFilter(inc, exc)
	if err != nil {
		return nil, usagef("%v", err)
	}
	return f, nil
}

// --on-damaged's values.
const (
	onDamagedFail     = "fail"
	onDamagedPrevious = "previous"
)

// onDamagedFlag reads --on-damaged: whether to fall back to the newest
// restorable step.
func onDamagedFlag(c *cli.Context) (bool, error) {
	switch v := c.String("on-damaged"); v {
	case onDamagedFail:
		return false, nil
	case onDamagedPrevious:
		if c.IsSet("step") {
			return false, usagef("--on-damaged previous picks the step itself: drop --step %d", c.Int64("step"))
		}
		return true, nil
	default:
		return false, usagef("--on-damaged %q: want fail or previous", v)
	}
}
