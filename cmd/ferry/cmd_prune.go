package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/ferrylabs/ferry/internal/prune"
	"github.com/ferrylabs/ferry/internal/units"
)

type pruneOptions struct {
	remote         remoteOptions
	from           string
	keepLast       int
	keepEvery      int64
	minAge         time.Duration
	abandonedAfter time.Duration
	dryRun         bool
	json           bool
}

func newPruneCommand() *cli.Command {
	return &cli.Command{
		Name:  "prune",
		Usage: "delete committed steps outside a retention policy, then objects nothing references",
		Description: commandDoc{
			about: "Deletes the manifests of steps outside the policy (--keep-last N, plus every --keep-every K), then the " +
				"objects no kept manifest references once older than --min-age, then node parts and multipart uploads " +
				"abandoned for --abandoned-after. Never an object a kept manifest or a step still uploading needs: safe while " +
				"agents upload, as long as --min-age exceeds the longest push of one node. --dry-run prints what a real run deletes. " +
				"So the objects of the steps a run prunes stay until --min-age has passed (a run with the default 24h frees no " +
				"bytes of them): each run, dry or not, ends with the lines `later:` saying what becomes deletable and from when; " +
				"running prune again then frees it.",
			examples: []string{"ferry prune --from s3://my-bucket/run --keep-last 3 --keep-every 10000 --dry-run"},
			exits:    []string{"0 pruned (or nothing to prune)", exit1, exit2},
		}.String(),
		Flags: append([]cli.Flag{
			fromFlag(),
			&cli.IntFlag{Name: "keep-last", Usage: "keep the `N` newest committed steps (required, at least 1)"},
			&cli.Int64Flag{Name: "keep-every", Usage: "also keep every step divisible by `K`"},
			&cli.DurationFlag{Name: "min-age", Value: prune.DefaultMinAge, Usage: "grace period: delete unreferenced objects, and objects of pruned manifests, only once this old (0: now; only when nothing uploads)"},
			&cli.DurationFlag{Name: "abandoned-after", Value: prune.DefaultAbandonedAfter, Usage: "abort multipart uploads, and drop node parts of steps never committed, once this old"},
			&cli.BoolFlag{Name: "dry-run", Usage: "print what would be deleted, delete nothing"},
			&cli.BoolFlag{Name: "json", Usage: "print the plan as JSON"},
		}, commonFlags()...),
		Action: func(c *cli.Context) error {
			if c.Args().Len() > 0 {
				return usagef("prune takes no arguments (got %q)", c.Args().First())
			}
			return runPrune(c.Context, pruneOptions{
				remote:         readRemoteOptions(c),
				from:           c.String("from"),
				keepLast:       c.Int("keep-last"),
				keepEvery:      c.Int64("keep-every"),
				minAge:         c.Duration("min-age"),
				abandonedAfter: c.Duration("abandoned-after"),
				dryRun:         c.Bool("dry-run"),
				json:           c.Bool("json"),
			}, c.App.Writer, c.App.ErrWriter)
		},
	}
}

// pruneSummary is what prune prints with --json.
type pruneSummary struct {
	DryRun bool `json:"dry_run"`
	*prune.Plan
	// Deleted lists every key deleted (or, in a dry run, to delete), in
	// order; aborted uploads as "key (upload ID)".
	Deleted []string `json:"deleted"`
}

func runPrune(ctx context.Context, o pruneOptions, stdout, stderr io.Writer) error {
	switch {
	case o.keepLast < 1:
		return usagef("--keep-last is required and must be at least 1 (the newest step is always kept)")
	case o.keepEvery < 0:
		return usagef("--keep-every %d: must be positive", o.keepEvery)
	case o.minAge < 0 || o.abandonedAfter <= 0:
		return usagef("--min-age must be 0 or more and --abandoned-after positive")
	}
	log, err := newLogger(o.remote, stderr)
	if err != nil {
		return err
	}
	defer log.Sync() //nolint:errcheck // nothing useful to do if stderr is gone
	st, loc, err := openStore(ctx, o.remote, "from", o.from, log, 0, nil)
	if err != nil {
		return err
	}
	minAge := o.minAge
	if minAge == 0 {
		minAge = -1 // prune.Options: negative is none, 0 the default
	}
	popts := prune.Options{
		Store: st, Prefix: loc.Prefix,
		Policy:         prune.Policy{KeepLast: o.keepLast, KeepEvery: o.keepEvery},
		MinAge:         minAge,
		AbandonedAfter: o.abandonedAfter,
		Logger:         log,
	}
	plan, err := prune.MakePlan(ctx, popts)
	if err != nil {
		return fmt.Errorf("prune %s: %w", loc, err)
	}
	if o.dryRun {
		prune.LogPlan(log, plan)
	} else if err := prune.Execute(ctx, popts, plan); err != nil {
		return fmt.Errorf("prune %s: %w", loc, err)
	}
	if o.json {
		return printJSON(stdout, pruneSummary{DryRun: o.dryRun, Plan: plan, Deleted: nonNil(plan.Deleted())})
	}
	verb := "deleted"
	if o.dryRun {
		verb = "would delete"
	}
	for _, key := range plan.Deleted() {
		fmt.Fprintf(stdout, "%s %s\n", verb, key)
	}
	fmt.Fprintf(stdout, "%s: kept steps %v; pruned steps %v; %s %d objects (%s), %d node parts, %d expired tombstones, %d restore check-ins, %d multipart uploads\n",
		loc, plan.Kept, plan.Pruned, verb, len(plan.Objects), units.FormatBytes(plan.ObjectBytes), len(plan.Parts), len(plan.ExpiredTombstones), len(plan.Checkins), len(plan.Uploads))
	printLater(stdout, plan.Later, o.minAge, time.Now())
	return nil
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
