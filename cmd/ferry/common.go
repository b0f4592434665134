package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/ferrylabs/ferry/internal/filestore"
	"github.com/ferrylabs/ferry/internal/remote"
	"github.com/ferrylabs/ferry/internal/s3store"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/internal/units"
	"github.com/ferrylabs/ferry/manifest"
)

// commonFlags are accepted by every command that talks to a bucket.
func commonFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "endpoint", EnvVars: []string{"FERRY_ENDPOINT"}, Usage: "S3 API `URL` (default: S3_ENDPOINT_URL, else AWS_ENDPOINT_URL_S3, else AWS_ENDPOINT_URL, else AWS S3)"},
		&cli.StringFlag{Name: "region", EnvVars: []string{"FERRY_REGION"}, Usage: "region (default: AWS_REGION, else \"auto\" as R2 expects)"},
		&cli.StringFlag{Name: "profile", EnvVars: []string{"FERRY_PROFILE"}, Usage: "AWS shared config `profile` (default: AWS_PROFILE, else the standard credential chain)"},
		&cli.StringFlag{Name: "log-level", Value: "info", EnvVars: []string{"FERRY_LOG_LEVEL"}, Usage: "debug, info, warn or error"},
		&cli.StringFlag{Name: "log-format", Value: "console", EnvVars: []string{"FERRY_LOG_FORMAT"}, Usage: "console or json"},
		&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, EnvVars: []string{"FERRY_QUIET"}, Usage: "no progress display and only warnings in the log"},
	}
}

// remoteOptions are the flags common to every command, converted once so
// lower layers never see cli.Context.
type remoteOptions struct {
	Endpoint, Region, Profile string
	// AccessKeyID, SecretAccessKey and SessionToken, when set, replace the
	// credential chain (copy's destination keys); no flag sets them.
	AccessKeyID, SecretAccessKey, SessionToken string
	LogLevel, LogFormat                        string
	Quiet                                      bool
}

func readRemoteOptions(c *cli.Context) remoteOptions {
	return remoteOptions{
		Endpoint:  c.String("endpoint"),
		Region:    c.String("region"),
		Profile:   c.String("profile"),
		LogLevel:  c.String("log-level"),
		LogFormat: c.String("log-format"),
		Quiet:     c.Bool("quiet"),
	}
}

// newLogger builds the zap logger writing to w.
func newLogger(o remoteOptions, w io.Writer) (*zap.Logger, error) {
	level, err := zapcore.ParseLevel(o.LogLevel)
	if err != nil {
		return nil, usagef("--log-level %q: use debug, info, warn or error", o.LogLevel)
	}
	if o.Quiet && level < zapcore.WarnLevel {
		level = zapcore.WarnLevel
	}
	encCfg := zap.NewProductionEncoderConfig()
	encCfg.EncodeTime = zapcore.ISO8601TimeEncoder
	var enc zapcore.Encoder
	switch o.LogFormat {
	case "console":
		encCfg.EncodeLevel = zapcore.CapitalLevelEncoder
		enc = zapcore.NewConsoleEncoder(encCfg)
	case "json":
		enc = zapcore.NewJSONEncoder(encCfg)
	default:
		return nil, usagef("--log-format %q: use console or json", o.LogFormat)
	}
	return zap.New(zapcore.NewCore(enc, zapcore.AddSync(w), level)), nil
}

// openStore parses an s3:// or file:// URL and opens the bucket or folder
// it names. Requests are counted in counters when it is not nil.
func openStore(ctx context.Context, o remoteOptions, flag, url string, log *zap.Logger, maxConns int, counters *s3store.Counters) (store.Store, manifest.Location, error) {
	loc, err := parseLocation(flag, url)
	if err != nil {
		return nil, manifest.Location{}, err
	}
	st, err := openLocation(ctx, o, loc, log, maxConns, func(op string) {
		if counters != nil {
			counters.Count(op)
		}
	})
	if err != nil {
		return nil, manifest.Location{}, err
	}
	return st, loc, nil
}

// openLocation opens the bucket or folder of loc; onRequest is called for
// each request.
func openLocation(ctx context.Context, o remoteOptions, loc manifest.Location, log *zap.Logger, maxConns int, onRequest func(op string)) (store.Store, error) {
	if loc.IsFile() {
		return filestore.Open(loc.Bucket, filestore.Options{OnRequest: onRequest})
	}
	return s3store.New(ctx, s3store.Config{
		Endpoint:    o.Endpoint,
		Region:      o.Region,
		Profile:     o.Profile,
		Bucket:      loc.Bucket,
		AccessKeyID: o.AccessKeyID, SecretAccessKey: o.SecretAccessKey, SessionToken: o.SessionToken,
		MaxConns:  maxConns,
		Logger:    log,
		OnRequest: onRequest,
	})
}

// parseLocation reads an s3://bucket/prefix or file:///folder flag.
func parseLocation(flag, url string) (manifest.Location, error) {
	if url == "" {
		return manifest.Location{}, usagef("--%s is required (s3://bucket/prefix or file:///folder)", flag)
	}
	loc, err := manifest.ParseURL(url)
	if err != nil {
		return manifest.Location{}, usagef("--%s: %v", flag, err)
	}
	return loc, nil
}

// defaultStateDir is where resume state lives unless --state-dir says
// otherwise: $FERRY_STATE_DIR, $XDG_STATE_HOME/ferry, ~/.local/state/ferry.
func defaultStateDir() string {
	if d := os.Getenv("FERRY_STATE_DIR"); d != "" {
		return d
	}
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "ferry")
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".local", "state", "ferry")
	}
	return filepath.Join(os.TempDir(), "ferry-state")
}

// sizeFlag reads a byte-size flag such as --part-size 64MiB.
func sizeFlag(c *cli.Context, name string) (int64, error) {
	n, err := units.ParseBytes(c.String(name))
	if err != nil {
		return 0, usagef("--%s: %v", name, err)
	}
	return n, nil
}

// rateFlag reads a rate flag such as --bandwidth 800MiB/s; empty is 0
// (unlimited).
func rateFlag(c *cli.Context, name string) (int64, error) {
	if c.String(name) == "" {
		return 0, nil
	}
	n, err := units.ParseRate(c.String(name))
	if err != nil {
		return 0, usagef("--%s: %v", name, err)
	}
	return n, nil
}

// isTerminal reports whether w is a terminal, for the progress display.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("write JSON: %w", err)
	}
	return nil
}

// missingStep turns a "no committed checkpoint" error of step (-1: the
// latest) at loc into one line that says which steps do exist, or that
// nothing is committed there, and what to do. Other errors pass unchanged.
func missingStep(ctx context.Context, st store.Store, loc manifest.Location, step int64, err error) error {
	if !errors.Is(err, remote.ErrNoCheckpoint) {
		return err
	}
	const show = 10
	steps, lerr := remote.Steps(ctx, st, loc.Prefix, show+1)
	switch {
	case lerr != nil:
		return err
	case len(steps) == 0:
		return fmt.Errorf("%w at %s: nothing is committed there; check --from (restore --allow-empty starts fresh)", remote.ErrNoCheckpoint, loc)
	case step < 0:
		return err // a step appeared meanwhile: report the original error
	}
	list := make([]string, 0, show)
	for _, s := range steps[:min(len(steps), show)] {
		list = append(list, strconv.FormatInt(s, 10))
	}
	more := ""
	if len(steps) > show {
		more = ", ... (ferry list shows all)"
	}
	return fmt.Errorf("step %d: %w at %s; committed steps, newest first: %s%s", step, remote.ErrNoCheckpoint, loc, strings.Join(list, ", "), more)
}

// jsonResult is a command's --json result, which carries the command's
// error when it failed.
type jsonResult interface{ setError(msg string) }

func (s *pushSummary) setError(msg string)    { s.Error = msg }
func (s *restoreSummary) setError(msg string) { s.Error = msg }

// printResultJSON prints a command's --json result even when it failed
// (with the error in it), so scripts parse one shape, and returns the
// command's error, or the print's when there is none.
func printResultJSON(stdout io.Writer, v jsonResult, err error) error {
	if err != nil {
		v.setError(oneLine(err.Error()))
	}
	if perr := printJSON(stdout, v); err == nil {
		return perr
	}
	return err
}

// checkStepChoice checks --step, --last and --all: at most one of them.
func checkStepChoice(c *cli.Context, step int64, last int, all bool) error {
	picked := 0
	for _, set := range []bool{c.IsSet("step"), c.IsSet("last"), all} {
		if set {
			picked++
		}
	}
	switch {
	case picked > 1:
		return usagef("--step, --last and --all choose the steps: give one of them")
	case c.IsSet("last") && last < 1:
		return usagef("--last %d: want the number of newest steps, at least 1", last)
	case c.IsSet("step") && step < 0:
		return usagef("--step %d: want a step number, 0 or more", step)
	}
	return nil
}

// selectSteps returns the committed steps that --step, --last or --all
// select, newest first: the latest one when none is given.
func selectSteps(ctx context.Context, st store.Store, loc manifest.Location, step int64, last int, all bool) ([]int64, error) {
	if step >= 0 {
		return []int64{step}, nil
	}
	limit := 1
	switch {
	case all:
		limit = 0
	case last > 0:
		limit = last
	}
	steps, err := remote.Steps(ctx, st, loc.Prefix, limit)
	if err != nil {
		return nil, err
	}
	if len(steps) == 0 {
		return nil, remote.ErrNoCheckpoint
	}
	return steps, nil
}
