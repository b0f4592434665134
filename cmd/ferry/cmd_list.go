package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/ferrylabs/ferry/internal/remote"
	"github.com/ferrylabs/ferry/internal/units"
)

type listOptions struct {
	remote remoteOptions
	from   string
	json   bool
	last   int
}

func newListCommand() *cli.Command {
	return &cli.Command{
		Name:  "list",
		Usage: "list committed steps: step, files, bytes, created",
		Description: commandDoc{
			about: "Lists the committed steps of the run at --from, oldest first (the newest last), one line each: step, files, bytes, and " +
				"when it was committed. Steps still uploading, and parts of steps other nodes have not finished, are not listed.",
			examples: []string{"ferry list --from s3://my-bucket/run --last 5"},
			exits:    []string{"0 listed (when nothing is committed: nothing on stdout, and a line saying so on stderr)", exit1, exit2},
		}.String(),
		Flags: append([]cli.Flag{
			fromFlag(),
			&cli.IntFlag{Name: "last", Value: 0, Usage: "show only the newest `N` steps (0: all)"},
			&cli.BoolFlag{Name: "json", Usage: "print JSON"},
		}, commonFlags()...),
		Action: func(c *cli.Context) error {
			if c.Args().Len() > 0 {
				return usagef("list takes no arguments (got %q)", c.Args().First())
			}
			if c.Int("last") < 0 {
				return usagef("--last %d: want the number of newest steps to show, or 0 for all", c.Int("last"))
			}
			return runList(c.Context, listOptions{remote: readRemoteOptions(c), from: c.String("from"), json: c.Bool("json"), last: c.Int("last")},
				c.App.Writer, c.App.ErrWriter)
		},
	}
}

// stepSummary is one row of `ferry list`.
type stepSummary = remote.Summary

func runList(ctx context.Context, o listOptions, stdout, stderr io.Writer) error {
	st, loc, err := openToRead(ctx, o.remote, o.from, stderr)
	if err != nil {
		return err
	}
	rows, err := remote.Summaries(ctx, st, loc.Prefix, o.last)
	if err != nil {
		return fmt.Errorf("list %s: %w", loc, err)
	}
	if o.json {
		return printJSON(stdout, rows)
	}
	if len(rows) == 0 {
		fmt.Fprintf(stderr, "no committed checkpoints at %s\n", loc)
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STEP\tFILES\tBYTES\tCREATED")
	for _, r := range rows {
		rev := ""
		if r.Revision > 0 {
			rev = fmt.Sprintf(" (revision %d)", r.Revision)
		}
		fmt.Fprintf(tw, "%d\t%d\t%s\t%s%s\n", r.Step, r.Files, units.FormatBytes(r.Bytes), r.Created.Format(time.RFC3339), rev)
	}
	return tw.Flush()
}
