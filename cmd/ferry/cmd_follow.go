package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/urfave/cli/v2"
	"go.uber.org/zap"

	"github.com/ferrylabs/ferry/internal/follow"
	"github.com/ferrylabs/ferry/internal/s3store"
	"github.com/ferrylabs/ferry/restore"
)

type followOptions struct {
	remote      remoteOptions
	from, to    string
	keep        int
	since       int64
	interval    time.Duration
	exec        string
	execStop    bool
	once        bool
	json        bool
	concurrency int
	fsync       bool
}

func newFollowCommand() *cli.Command {
	return &cli.Command{
		Name:  "follow",
		Usage: "restore each step of a run as it is committed, for evaluation nodes",
		Description: commandDoc{
			about: "Polls the run at --from (one LIST per --interval; a manifest is read only when a step is new or changed) " +
				"and restores each newly committed step, and each new revision of one, in step order, into --to/STEP/ " +
				"(the step number in decimal), every byte verified. A step is restored beside the others and renamed into " +
				"place as a whole, so a job reading --to/STEP/ never sees part of one. --to/.ferry-follow.json is the " +
				"cursor: a restart resumes where follow stopped without downloading a placed step again. --exec runs a " +
				"command for each step placed, with FERRY_STEP, FERRY_STEP_DIR, FERRY_REVISION and FERRY_FROM in its " +
				"environment; follow waits for it, and a step whose command did not finish before a stop has it run again " +
				"at the next start. A failed command is logged and follow goes on (--on-exec-error stop ends it). A damaged " +
				"step (or one recorded damaged in the bucket) is skipped with a warning and not tried again unless its " +
				"manifest changes. --keep N deletes the older step folders follow placed (never others). SIGTERM or SIGINT " +
				"stops it cleanly: a step in progress is abandoned, its verified files kept for the next start.",
			env: "FERRY_FROM is the run read, as for restore; FERRY_CONCURRENCY the GETs in flight.",
			examples: []string{
				"ferry follow --from s3://my-bucket/run --to /nvme/eval --keep 2 --exec 'python eval.py \"$FERRY_STEP_DIR\"'",
				"ferry follow --from s3://my-bucket/run --to /nvme/eval --once --json",
			},
			exits: []string{"0 stopped by a signal, or with --once every new step placed (damaged ones skipped: --json's skipped names them)",
				exit1 + "; with --once, a step that could not be restored (the next run tries it again); with --on-exec-error stop, a failed command",
				exit2},
		}.String(),
		Flags: followFlags(),
		Action: func(c *cli.Context) error {
			o, err := readFollowOptions(c)
			if err != nil {
				return err
			}
			return runFollow(c.Context, o, c.App.Writer, c.App.ErrWriter)
		},
	}
}

func followFlags() []cli.Flag {
	return append([]cli.Flag{
		&cli.StringFlag{Name: "from", EnvVars: []string{"FERRY_FROM"}, Usage: "the run to follow, `s3://bucket/prefix` or file:///folder (required)"},
		&cli.StringFlag{Name: "to", Usage: "`DIR` to place the steps in, one folder per step: DIR/STEP/ (required; created if missing)"},
		&cli.IntFlag{Name: "keep", Usage: "keep the `N` newest step folders follow placed and delete older ones (0: keep every one)"},
		&cli.Int64Flag{Name: "since", Usage: "ignore the steps before this one (default: every committed step)"},
		&cli.DurationFlag{Name: "interval", Value: follow.DefaultInterval, EnvVars: []string{"FERRY_FOLLOW_INTERVAL"}, Usage: "time between two polls of the bucket"},
		&cli.StringFlag{Name: "exec", Usage: "shell `CMD` run (sh -c) for each step placed, with FERRY_STEP, FERRY_STEP_DIR, FERRY_REVISION and FERRY_FROM set; its output is passed through (default: none)"},
		&cli.StringFlag{Name: "on-exec-error", Value: "continue", Usage: "when --exec fails: continue (log it and go on with the next step) or stop (exit 1; the step's command runs again at the next start)"},
		&cli.BoolFlag{Name: "once", Usage: "poll once, place what is new, and exit (for cron and tests)"},
		&cli.BoolFlag{Name: "json", Usage: "with --once, print what was placed, skipped and removed, and the requests made, as JSON"},
		&cli.IntFlag{Name: "concurrency", Value: restore.DefaultConcurrency, EnvVars: []string{"FERRY_CONCURRENCY"}, Usage: "most ranged GETs in flight"},
		&cli.BoolFlag{Name: "fsync", EnvVars: []string{"FERRY_FSYNC"}, Usage: "make every restored file durable (fsync) before its step is placed"},
	}, commonFlags()...)
}

// readFollowOptions converts follow's flags into its options once.
func readFollowOptions(c *cli.Context) (followOptions, error) {
	if c.Args().Len() > 0 {
		return followOptions{}, usagef("follow takes no arguments (got %q); use --to DIR", c.Args().First())
	}
	o := followOptions{
		remote: readRemoteOptions(c), from: c.String("from"), to: c.String("to"), keep: c.Int("keep"),
		since: c.Int64("since"), interval: c.Duration("interval"), exec: c.String("exec"), once: c.Bool("once"),
		json: c.Bool("json"), concurrency: c.Int("concurrency"), fsync: c.Bool("fsync"),
	}
	switch v := c.String("on-exec-error"); v {
	case "continue":
	case "stop":
		o.execStop = true
	default:
		return o, usagef("--on-exec-error %q: want continue or stop", v)
	}
	switch {
	case o.to == "":
		return o, usagef("--to is required (the directory to place steps in)")
	case o.keep < 0:
		return o, usagef("--keep %d: want 0 (keep every step) or more", o.keep)
	case o.interval <= 0:
		return o, usagef("--interval %v: must be positive", o.interval)
	case o.json && !o.once:
		return o, usagef("--json needs --once (a follow that runs on reports in its log)")
	case o.concurrency < 1 || o.concurrency > 1024:
		return o, usagef("--concurrency %d: must be between 1 and 1024", o.concurrency)
	}
	return o, nil
}

// followSummary is what follow --once --json prints.
type followSummary struct {
	follow.Report
	Requests map[string]int64 `json:"requests"`
	Error    string           `json:"error,omitempty"`
}

func (s *followSummary) setError(msg string) { s.Error = msg }

func runFollow(ctx context.Context, o followOptions, stdout, stderr io.Writer) error {
	log, err := newLogger(o.remote, stderr)
	if err != nil {
		return err
	}
	defer log.Sync() //nolint:errcheck // nothing useful to do if stderr is gone
	var counters s3store.Counters
	st, loc, err := openStore(ctx, o.remote, "from", o.from, log, o.concurrency, &counters)
	if err != nil {
		return err
	}
	execOut := stdout
	if o.json {
		execOut = stderr // stdout is the JSON's
	}
	f, err := follow.New(follow.Options{
		Store: st, Prefix: loc.Prefix, From: loc.String(), Dir: o.to, Keep: o.keep, Since: o.since,
		Interval: o.interval, Exec: o.exec, ExecStop: o.execStop, Stdout: execOut, Stderr: stderr, Logger: log,
		Restore: restore.Options{Concurrency: o.concurrency, Fsync: o.fsync, RecordBy: recordBy("follow")},
	})
	if err != nil {
		return err
	}
	if !o.once {
		log.Info("following the run", zap.String("from", loc.String()), zap.String("to", o.to), zap.Duration("interval", o.interval))
		return f.Run(ctx)
	}
	rep, err := f.Poll(ctx)
	if ctx.Err() != nil {
		err = nil // stopped: the cursor holds what was finished
	}
	if o.json {
		return printResultJSON(stdout, &followSummary{Report: rep, Requests: counters.Snapshot()}, err)
	}
	printSkipped(stdout, rep.Skipped)
	for _, p := range rep.Placed {
		fmt.Fprintf(stdout, "placed step %d (revision %d) in %s: %d files, %d bytes downloaded\n", p.Step, p.Revision, p.Dir, p.Files, p.BytesDownloaded)
	}
	return err
}
