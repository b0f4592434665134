package main

import (
	"context"
	"time"

	"github.com/urfave/cli/v2"
	"go.uber.org/zap"

	"github.com/ferrylabs/ferry/internal/doctor"
)

// doctorOptions are doctor's own flags, beside the agent's.
type doctorOptions struct {
	json bool
	// from is the run whose health to check ("" for none), staleAfter
	// when its leftovers count as abandoned.
	from       string
	staleAfter time.Duration
}

// doctorHealthFlags are --from and --stale-after. --from has no FERRY_FROM:
// a job script that sets it for restore must not make every doctor read
// the run.
func doctorHealthFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "from", Usage: "also check the health of the run at `s3://bucket/prefix` (or file:///folder), reading only: newest restorable step, node parts of steps never committed, unfinished multipart uploads, damage records (default: none)"},
		&cli.DurationFlag{Name: "stale-after", Value: doctor.DefaultStaleAfter, Usage: "with --from, warn of node parts of uncommitted steps and of multipart uploads older than this"},
	}
}

// runHealth opens the run at d.from and checks its health; a run that
// cannot be opened is one fail line, and the other health checks skipped.
func runHealth(ctx context.Context, ro remoteOptions, d doctorOptions, log *zap.Logger) []doctor.Result {
	loc, err := parseLocation("from", d.from)
	if err == nil {
		st, openErr := openLocation(ctx, ro, loc, log, 4, nil)
		if openErr == nil {
			return doctor.Health(ctx, doctor.Run{Store: st, Prefix: loc.Prefix, URL: loc.String(), StaleAfter: d.staleAfter})
		}
		err = openErr
	}
	return []doctor.Result{{Check: "newest restorable", Status: doctor.Fail, Detail: "--from: " + err.Error()}}
}
