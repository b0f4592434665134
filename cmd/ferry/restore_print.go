package main

import (
	"fmt"
	"io"

	"github.com/ferrylabs/ferry/internal/units"
	"github.com/ferrylabs/ferry/restore"
)

// dryRunSummary is restore --dry-run's plan and what its requests cost.
type dryRunSummary struct {
	restore.Plan
	// CostUSD is the price at R2's rates of the requests made (the
	// manifest's) and of the download's GETs.
	CostUSD float64 `json:"cost_usd"`
}

// printDryRun prints restore --dry-run's plan.
func printDryRun(w io.Writer, o *restoreOptions, sum restoreSummary) {
	p := sum.DryRun
	fmt.Fprintf(w, "step %d from %s into %s: %d files, %s, %d links (dry run: nothing fetched or written)\n",
		sum.Step, o.from, o.to, sum.Files, units.FormatBytes(sum.Bytes), p.Symlinks)
	fmt.Fprintf(w, "  download: %d files, %s, %d ranged GETs\n", p.Download, units.FormatBytes(p.DownloadBytes), p.GETs)
	fmt.Fprintf(w, "  in place with the right size: %d files, %s, re-verified by BLAKE3 and kept if they match (%d GETs more if not)\n",
		p.Present, units.FormatBytes(p.PresentBytes), p.PresentGETs)
	fmt.Fprintf(w, "  requests: %d made to read the manifest, %d to download; $%.6f at R2's prices\n",
		totalRequests(sum.Requests), p.GETs, p.CostUSD)
}

func totalRequests(ops map[string]int64) int64 {
	var n int64
	for _, v := range ops {
		n += v
	}
	return n
}

// printSkipped prints a line for each damaged step a restore skipped.
func printSkipped(w io.Writer, skipped []restore.Skipped) {
	for _, s := range skipped {
		what := "its manifest"
		if s.Path != "" {
			what = s.Path
		}
		fmt.Fprintf(w, "skipped damaged step %d: %s: %s (%s)\n", s.Step, what, s.Reason, s.Record)
	}
}

// printNewerData warns that a step above the one restored has objects but
// no manifest.
func printNewerData(w io.Writer, step int64) {
	if step > 0 {
		fmt.Fprintf(w, "warning: objects of step %d exist without a manifest: an upload in flight or left unfinished by a stopped job, or a deleted manifest\n", step)
	}
}
