package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/ferrylabs/ferry/internal/ratelimit"
	"github.com/ferrylabs/ferry/internal/s3store"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/internal/units"
	"github.com/ferrylabs/ferry/internal/verify"
	"github.com/ferrylabs/ferry/manifest"
)

type verifyOptions struct {
	remote      remoteOptions
	from        string
	step        int64
	last        int
	all         bool
	share       float64
	json        bool
	bandwidth   int64
	concurrency int
	// markDamaged records each step found damaged in the bucket, as a
	// restore that finds it does; clearDamaged (>= 0) removes the record
	// of that step instead of verifying.
	markDamaged  bool
	clearDamaged int64
	// newest looks for the newest restorable step (verify_newest.go).
	newest bool
}

func newVerifyCommand() *cli.Command {
	return &cli.Command{
		Name:  "verify",
		Usage: "check that committed steps are restorable, writing nothing locally: manifest, objects present with their sizes, and with --read-data every byte's BLAKE3",
		Description: commandDoc{
			about: "Checks that committed steps are restorable, writing nothing locally: the latest unless told --step N, " +
				"--last N or --all. Each step's manifest and shards must read and validate, and every object they reference " +
				"must exist with the recorded size (one LIST per folder of objects). --read-data streams every object and " +
				"checks its bytes against the manifest's BLAKE3; --read-data-subset 10% does so for a random choice of files " +
				"holding about that share of each step's bytes. Without them no byte is read: a changed byte goes unseen, and " +
				"the output says what was checked. --mark-damaged records each damaged step in the bucket, as restore does when " +
				"it finds one, so that restore --on-damaged previous skips it on every node; --clear-damaged N removes the record. " +
				"--newest-restorable checks the committed steps newest first, as restore --on-damaged previous chooses, and prints " +
				"the first that holds and each newer step skipped, with why: a step recorded damaged is skipped unread.",
			env: "Its limits are its own, FERRY_VERIFY_CONCURRENCY and FERRY_VERIFY_BANDWIDTH: FERRY_CONCURRENCY and " +
				"FERRY_BANDWIDTH, set for uploads, do not change it. FERRY_FROM is the run it reads.",
			examples: []string{"ferry verify --from s3://my-bucket/run --last 3 --read-data-subset 10%",
				"ferry verify --from s3://my-bucket/run --read-data --mark-damaged",
				"ferry verify --from s3://my-bucket/run --clear-damaged 600",
				"ferry verify --from s3://my-bucket/run --newest-restorable --read-data --json"},
			exits: []string{"0 every step checked holds (or, with --clear-damaged, the record is gone; with --newest-restorable, a restorable step was found, newer ones may have been skipped)",
				"1 a step is not restorable as recorded: one line per problem (missing, wrong size, wrong hash, unreadable, manifest); with --newest-restorable, no committed step is restorable",
				exit2, "3 nothing is committed at --from, or --step N is not committed"},
		}.String(),
		Flags: append([]cli.Flag{
			fromFlag(),
			&cli.Int64Flag{Name: "step", Value: -1, Usage: "check this step (default: the latest committed)"},
			&cli.IntFlag{Name: "last", Usage: "check the newest `N` committed steps"},
			&cli.BoolFlag{Name: "all", Usage: "check every committed step"},
			&cli.BoolFlag{Name: "read-data", Usage: "also read every object and check its bytes against the manifest's BLAKE3"},
			&cli.StringFlag{Name: "read-data-subset", Usage: "read and check a random choice of files holding about `PERCENT` of each step's bytes, e.g. 10% (default: none)"},
			&cli.BoolFlag{Name: "json", Usage: "print the report as JSON: each step with its problems, and the requests made by operation"},
			&cli.StringFlag{Name: "bandwidth", EnvVars: []string{"FERRY_VERIFY_BANDWIDTH"}, Usage: "cap the read rate of --read-data, e.g. 800MiB/s (default: unlimited)"},
			&cli.IntFlag{Name: "concurrency", EnvVars: []string{"FERRY_VERIFY_CONCURRENCY"}, Value: verify.DefaultConcurrency, Usage: "most ranged GETs in flight with --read-data"},
			&cli.BoolFlag{Name: "mark-damaged", Usage: "record each step found damaged (an object missing, of the wrong size or hash, a manifest that does not validate) in the bucket, as restore does, so that every restore --on-damaged previous skips it"},
			&cli.BoolFlag{Name: "newest-restorable", Usage: "find the newest committed step restorable as checked (sizes, or bytes with --read-data), skipping steps recorded damaged unread, and print it with each newer step skipped and why"},
			&cli.Int64Flag{Name: "clear-damaged", Value: -1, Usage: "remove the bucket's record that step `N` is damaged (once it is repaired), and check nothing (default: none)"},
		}, commonFlags()...),
		Action: func(c *cli.Context) error {
			o, err := readVerifyOptions(c)
			if err != nil {
				return err
			}
			return runVerify(c.Context, o, c.App.Writer, c.App.ErrWriter)
		},
	}
}

// readVerifyOptions reads and checks verify's flags.
func readVerifyOptions(c *cli.Context) (verifyOptions, error) {
	o := verifyOptions{remote: readRemoteOptions(c), from: c.String("from"), step: c.Int64("step"), last: c.Int("last"),
		all: c.Bool("all"), json: c.Bool("json"), concurrency: c.Int("concurrency"),
		markDamaged: c.Bool("mark-damaged"), clearDamaged: c.Int64("clear-damaged"), newest: c.Bool("newest-restorable")}
	if o.newest && (c.IsSet("step") || c.IsSet("last") || c.IsSet("all") || c.IsSet("clear-damaged")) {
		return o, usagef("--newest-restorable checks the committed steps newest first: give it without --step, --last, --all or --clear-damaged")
	}
	if c.IsSet("clear-damaged") && (o.clearDamaged < 0 || o.markDamaged) {
		return o, usagef("--clear-damaged N: want a step number, 0 or more, without --mark-damaged")
	}
	if c.Args().Len() > 0 {
		return o, usagef("verify takes no arguments (got %q)", c.Args().First())
	}
	if err := checkStepChoice(c, o.step, o.last, o.all); err != nil {
		return o, err
	}
	if o.concurrency < 1 || o.concurrency > 1024 {
		return o, usagef("--concurrency %d: must be between 1 and 1024", o.concurrency)
	}
	var err error
	if o.share, err = readShare(c); err != nil {
		return o, err
	}
	if o.bandwidth, err = rateFlag(c, "bandwidth"); err != nil {
		return o, err
	}
	return o, nil
}

// readShare reads --read-data and --read-data-subset into a share of the
// bytes to read: 0, (0, 1) or 1.
func readShare(c *cli.Context) (float64, error) {
	subset := c.String("read-data-subset")
	switch {
	case c.Bool("read-data") && subset != "":
		return 0, usagef("--read-data reads everything; --read-data-subset a share: give one of them")
	case c.Bool("read-data"):
		return 1, nil
	case subset == "":
		return 0, nil
	}
	pct, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(subset), "%"), 64)
	if err != nil || !strings.HasSuffix(strings.TrimSpace(subset), "%") || pct <= 0 || pct > 100 {
		return 0, usagef("--read-data-subset %q: want a percentage above 0 and at most 100, e.g. 10%%", subset)
	}
	return pct / 100, nil
}

func runVerify(ctx context.Context, o verifyOptions, stdout, stderr io.Writer) error {
	log, err := newLogger(o.remote, stderr)
	if err != nil {
		return err
	}
	var counters s3store.Counters
	st, loc, err := openStore(ctx, o.remote, "from", o.from, log, o.concurrency, &counters)
	if err != nil {
		return err
	}
	if o.clearDamaged >= 0 {
		return clearDamaged(ctx, st, loc, o.clearDamaged, stdout)
	}
	if o.newest {
		return runNewestRestorable(ctx, o, st, loc, &counters, stdout)
	}
	steps, err := stepsToVerify(ctx, st, loc, o)
	if err != nil {
		return err
	}
	// --bandwidth caps what verify reads (ratelimit.Downloads).
	reps, err := verify.Verify(ctx, verify.Options{Store: ratelimit.Downloads(st, ratelimit.New(o.bandwidth)), Prefix: loc.Prefix,
		Steps: steps, ReadShare: o.share, Concurrency: o.concurrency, Logger: log})
	if err != nil {
		return fmt.Errorf("verify %s: %w", loc, err)
	}
	var marks []damageMark
	if o.markDamaged {
		marks = markDamaged(ctx, st, loc, reps)
	}
	if o.json {
		if err := printJSON(stdout, verifyJSON{Checked: checked(o.share), Steps: reps, Marked: marks, Requests: counters.Snapshot()}); err != nil {
			return err
		}
	} else {
		printVerify(stdout, reps)
		fmt.Fprintf(stdout, "checked: %s\n", checkedLine(o.share))
		for _, m := range marks {
			fmt.Fprintf(stdout, "step %d: %s\n", m.Step, m.Record)
		}
	}
	return verifyOutcome(loc, reps)
}

// checked names what verify checked, for --json: "sizes", "bytes", or
// "bytes of 10% of each step".
func checked(share float64) string {
	switch {
	case share <= 0:
		return "sizes"
	case share >= 1:
		return "bytes"
	}
	return fmt.Sprintf("bytes of %g%% of each step", share*100)
}

// checkedLine says in full what verify checked, and what it did not.
func checkedLine(share float64) string {
	const base = "manifests, and every object present with its size"
	switch {
	case share <= 0:
		return base + "; no bytes were read, so a changed byte goes unseen (--read-data reads and hashes every byte)"
	case share >= 1:
		return base + ", and every byte against the manifest's BLAKE3"
	}
	return base + fmt.Sprintf(", and the bytes of a random choice of files holding about %g%% of each step against their BLAKE3; "+
		"the other files' bytes were not read", share*100)
}

// verifyJSON is verify's --json output.
type verifyJSON struct {
	// Checked is what was checked: "sizes", "bytes", or "bytes of P% of
	// each step".
	Checked string              `json:"checked"`
	Steps   []verify.StepReport `json:"steps"`
	// Marked, with --mark-damaged, says what became of each damaged
	// step's record.
	Marked []damageMark `json:"marked,omitempty"`
	// Requests counts the S3 requests made, by operation, retries included.
	Requests map[string]int64 `json:"requests"`
}

// stepsToVerify returns the committed steps o selects, newest first.
func stepsToVerify(ctx context.Context, st store.Store, loc manifest.Location, o verifyOptions) ([]int64, error) {
	steps, err := selectSteps(ctx, st, loc, o.step, o.last, o.all)
	if err != nil {
		return nil, fmt.Errorf("verify %s: %w", loc, err)
	}
	return steps, nil
}

// printVerify prints a line per step and one per problem.
func printVerify(w io.Writer, reps []verify.StepReport) {
	for _, r := range reps {
		read := ""
		if r.FilesRead > 0 {
			read = fmt.Sprintf(", %d read (%s)", r.FilesRead, units.FormatBytes(r.BytesRead))
		}
		state := "ok"
		if !r.OK() {
			state = fmt.Sprintf("%d problems", len(r.Problems))
		}
		fmt.Fprintf(w, "step %d: %s: %d files, %s%s\n", r.Step, state, r.Files, units.FormatBytes(r.Bytes), read)
		for _, p := range r.Problems {
			fmt.Fprintf(w, "  %s\n", p)
		}
	}
}

// errVerifyFailed is verify's outcome when a step has problems.
var errVerifyFailed = errors.New("not restorable as recorded")

// verifyOutcome is nil when every step holds, else an error naming the
// broken steps (exit 1).
func verifyOutcome(loc manifest.Location, reps []verify.StepReport) error {
	var bad []string
	for _, r := range reps {
		if !r.OK() {
			bad = append(bad, strconv.FormatInt(r.Step, 10))
		}
	}
	if len(bad) == 0 {
		return nil
	}
	return fmt.Errorf("verify %s: step %s %w (the problems are listed above)", loc, strings.Join(bad, ", "), errVerifyFailed)
}
