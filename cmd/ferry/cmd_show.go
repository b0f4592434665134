package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/urfave/cli/v2"

	"github.com/ferrylabs/ferry/internal/remote"
	"github.com/ferrylabs/ferry/manifest"
)

type showOptions struct {
	remote remoteOptions
	from   string
	step   int64
}

func newShowCommand() *cli.Command {
	return &cli.Command{
		Name:  "show",
		Usage: "print the committed manifest JSON of a step (the latest by default)",
		Description: commandDoc{
			about: "Prints the manifest of a committed step as JSON: every file with its size, BLAKE3 and object, the " +
				"format version and the step's metadata (docs/format.md describes each field).",
			examples: []string{"ferry show --from s3://my-bucket/run --step 1000"},
			exits:    []string{"0 printed", exit1, exit2, exit3},
		}.String(),
		Flags: append([]cli.Flag{
			fromFlag(),
			&cli.Int64Flag{Name: "step", Value: -1, Usage: "step to show (default: the latest committed)"},
		}, commonFlags()...),
		Action: func(c *cli.Context) error {
			if c.Args().Len() > 0 {
				return usagef("show takes no arguments (got %q)", c.Args().First())
			}
			return runShow(c.Context, showOptions{remote: readRemoteOptions(c), from: c.String("from"), step: c.Int64("step")}, c.App.Writer, c.App.ErrWriter)
		},
	}
}

func runShow(ctx context.Context, o showOptions, stdout, stderr io.Writer) error {
	st, loc, err := openToRead(ctx, o.remote, o.from, stderr)
	if err != nil {
		return err
	}
	var m *manifest.Manifest
	if o.step < 0 {
		m, err = remote.Latest(ctx, st, loc.Prefix)
	} else {
		m, err = remote.Get(ctx, st, loc.Prefix, o.step)
	}
	if err != nil {
		if errors.Is(err, remote.ErrNoCheckpoint) {
			return missingStep(ctx, st, loc, o.step, err)
		}
		return fmt.Errorf("show %s: %w", loc, err)
	}
	data, err := manifest.Encode(m)
	if err != nil {
		return err
	}
	_, err = stdout.Write(data)
	return err
}
