package main

import (
	"context"
	"io"

	"github.com/urfave/cli/v2"

	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/manifest"
)

// fromFlag is --from of the commands that read a run (list, show, verify,
// prune, restore): one wording and one environment variable for all.
func fromFlag() *cli.StringFlag {
	return &cli.StringFlag{Name: "from", EnvVars: []string{"FERRY_FROM"}, Usage: "checkpoint location `s3://bucket/prefix` or file:///folder to read (required)"}
}

// openToRead opens the run at --from for a command that reads a few
// manifests and prints them (list, show): a logger on stderr, the store's
// default connections, no request counts.
func openToRead(ctx context.Context, ro remoteOptions, from string, stderr io.Writer) (store.Store, manifest.Location, error) {
	log, err := newLogger(ro, stderr)
	if err != nil {
		return nil, manifest.Location{}, err
	}
	return openStore(ctx, ro, "from", from, log, 0, nil)
}
