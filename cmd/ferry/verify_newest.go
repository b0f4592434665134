package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/ferrylabs/ferry/internal/ratelimit"
	"github.com/ferrylabs/ferry/internal/remote"
	"github.com/ferrylabs/ferry/internal/s3store"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/internal/units"
	"github.com/ferrylabs/ferry/internal/verify"
	"github.com/ferrylabs/ferry/manifest"
)

// errNoneRestorable is verify --newest-restorable's outcome when every
// committed step was skipped (exit 1).
var errNoneRestorable = errors.New("no committed step is restorable as checked (each is listed above with why)")

// newestJSON is verify --newest-restorable --json.
type newestJSON struct {
	Checked string `json:"checked"`
	// Step is the newest restorable step, null when there is none.
	Step    *int64             `json:"newest_restorable"`
	Report  *verify.StepReport `json:"report,omitempty"`
	Skipped []verify.Skipped   `json:"skipped"`
	Marked  []damageMark       `json:"marked,omitempty"`
	// Requests counts the S3 requests made, by operation, retries included.
	Requests map[string]int64 `json:"requests"`
}

// runNewestRestorable answers "which step would restore --on-damaged
// previous land on?": the committed steps are checked newest first, as
// cheaply (sizes) or surely (bytes) as --read-data says, until one holds.
func runNewestRestorable(ctx context.Context, o verifyOptions, st store.Store, loc manifest.Location, counters *s3store.Counters, stdout io.Writer) error {
	steps, err := remote.Steps(ctx, st, loc.Prefix, 0)
	if err != nil {
		return fmt.Errorf("verify %s: %w", loc, err)
	}
	if len(steps) == 0 {
		return fmt.Errorf("verify %s: %w", loc, remote.ErrNoCheckpoint)
	}
	n, err := verify.NewestRestorable(ctx, verify.Options{Store: ratelimit.Downloads(st, ratelimit.New(o.bandwidth)), Prefix: loc.Prefix,
		Steps: steps, ReadShare: o.share, Concurrency: o.concurrency})
	if err != nil {
		return fmt.Errorf("verify %s: %w", loc, err)
	}
	var marks []damageMark
	if o.markDamaged {
		marks = markDamaged(ctx, st, loc, n.Reports)
	}
	if o.json {
		out := newestJSON{Checked: checked(o.share), Report: n.Report, Skipped: n.Skipped, Marked: marks, Requests: counters.Snapshot()}
		if n.Found {
			out.Step = &n.Step
		}
		if err := printJSON(stdout, out); err != nil {
			return err
		}
	} else {
		printNewest(stdout, n, o.share, marks)
	}
	if !n.Found {
		return fmt.Errorf("verify %s: %w", loc, errNoneRestorable)
	}
	return nil
}

// printNewest prints each step skipped and why, then the answer and what
// was checked to reach it.
func printNewest(w io.Writer, n verify.Newest, share float64, marks []damageMark) {
	for _, s := range n.Skipped {
		fmt.Fprintf(w, "skipped step %d: %s\n", s.Step, s.Reason)
	}
	for _, m := range marks {
		fmt.Fprintf(w, "step %d: %s\n", m.Step, m.Record)
	}
	if n.Found {
		r := n.Report
		fmt.Fprintf(w, "newest restorable: step %d (%d files, %s)\n", n.Step, r.Files, units.FormatBytes(r.Bytes))
	} else {
		fmt.Fprintln(w, "newest restorable: none")
	}
	fmt.Fprintf(w, "checked: %s\n", checkedLine(share))
}
