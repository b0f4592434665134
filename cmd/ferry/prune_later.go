package main

import (
	"fmt"
	"io"
	"time"

	"github.com/ferrylabs/ferry/internal/prune"
	"github.com/ferrylabs/ferry/internal/units"
)

// printLater says what the grace period keeps now and when a prune run
// deletes it: without it a run that prunes steps but frees 0 bytes (the
// objects of the steps it pruned wait --min-age behind their tombstones)
// reads as a bug.
func printLater(w io.Writer, later []prune.Deferred, minAge time.Duration, now time.Time) {
	for _, d := range later {
		what := "of pruned steps, kept until their tombstones are --min-age (" + minAge.String() + ") old"
		if d.Why == prune.LaterUnreferenced {
			what = "that nothing references yet, younger than --min-age (" + minAge.String() + "): an upload in flight, or one that will not commit"
		}
		when := "a prune run from " + whenAt(d.From, now) + " deletes them"
		if d.Until.Sub(d.From) >= time.Minute {
			when = "a prune run from " + whenAt(d.From, now) + " deletes the first of them, one from " + whenAt(d.Until, now) + " all"
		}
		fmt.Fprintf(w, "later: %d objects (%s) %s; %s\n", d.Objects, units.FormatBytes(d.Bytes), what, when)
	}
}

// whenAt is t in UTC to the second, and how far off it is.
func whenAt(t, now time.Time) string {
	return fmt.Sprintf("%s (in %s)", t.UTC().Format(time.RFC3339), t.Sub(now).Round(time.Minute))
}
