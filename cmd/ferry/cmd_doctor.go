package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/urfave/cli/v2"
	"go.uber.org/zap/zapcore"

	"github.com/ferrylabs/ferry/agent"
	"github.com/ferrylabs/ferry/agent/detect"
	"github.com/ferrylabs/ferry/internal/doctor"
	"github.com/ferrylabs/ferry/internal/s3store"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/internal/storecheck"
)

func newDoctorCommand() *cli.Command {
	return &cli.Command{
		Name:  "doctor",
		Usage: "check, before the job, everything `ferry agent` with the same settings needs: endpoint, credentials, bucket, permissions, conditional writes, clock, watch dir, state dir",
		Description: commandDoc{
			about: "Reads the agent's flags, environment and --config file, and prints one line per check: ok, warn or fail, " +
				"with the fix. It writes a few scratch objects under the prefix (a multipart upload of 10 MiB among them) and " +
				"deletes them again. With --quiet it prints only the checks that warn or fail. --from RUN adds the run's health, " +
				"read only: the newest restorable step (manifests validate, objects present with their sizes, damage records " +
				"honoured; ferry verify --newest-restorable --read-data reads the bytes), node parts of steps never committed and " +
				"multipart uploads never finished older than --stale-after, and the steps recorded damaged.",
			examples: []string{"ferry doctor --watch /nvme/ckpt --to s3://my-bucket/run",
				"ferry doctor --quiet   # in a job script: only the checks that warn or fail, nothing when all pass",
				"ferry doctor --watch /nvme/ckpt --to s3://my-bucket/run --from s3://my-bucket/run   # and the run's health"},
			exits: []string{"0 every check is ok (warnings allowed)", "1 a check failed (its line says the fix)", exit2},
		}.String(),
		Flags:  append(agentFlags(), append(doctorHealthFlags(), &cli.BoolFlag{Name: "json", Usage: "print the checks as JSON"})...),
		Before: func(c *cli.Context) error { return applyConfigFile(c, c.String("config")) },
		Action: func(c *cli.Context) error {
			if c.Args().Len() > 0 {
				return usagef("doctor takes no arguments (got %q); it reads the agent's flags", c.Args().First())
			}
			o, err := readAgentOptions(c)
			if err != nil {
				return err
			}
			d := doctorOptions{json: c.Bool("json"), from: c.String("from"), staleAfter: c.Duration("stale-after")}
			if d.staleAfter <= 0 {
				return usagef("--stale-after %s: must be positive", d.staleAfter)
			}
			if d.from != "" {
				if _, err := parseLocation("from", d.from); err != nil {
					return err
				}
			}
			return runDoctor(c.Context, o, d, c.App.Writer, c.App.ErrWriter)
		},
	}
}

// doctorFailed is doctor's error: the lines above say which checks.
type doctorFailed struct{ failed, total int }

func (e doctorFailed) Error() string {
	return fmt.Sprintf("doctor: %d of %d checks failed (see the lines marked fail)", e.failed, e.total)
}

func runDoctor(ctx context.Context, o agentOptions, d doctorOptions, stdout, stderr io.Writer) error {
	switch {
	case o.watch == "":
		return usagef("--watch is required (the checkpoint directory the agent would watch)")
	case !isKnownLayout(o.layout):
		return usagef("--layout %q: use one of %s", o.layout, joinNames(detect.LayoutNames()))
	}
	loc, err := parseLocation("to", o.to)
	if err != nil {
		return err
	}
	if o.remote.LogLevel == "info" {
		o.remote.LogLevel = zapcore.WarnLevel.String() // the checks are the output
	}
	log, err := newLogger(o.remote, stderr)
	if err != nil {
		return err
	}
	defer log.Sync() //nolint:errcheck // nothing useful to do if stderr is gone
	st, openErr := openLocation(ctx, o.remote, loc, log, 4, nil)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var creds func(context.Context) (string, error)
	if s3, ok := st.(*s3store.Store); ok {
		creds = s3.CredentialSource
	}
	base := stateBase(o.stateDir)
	detectOpts := o.detectOptions()
	detectOpts.Logger = log
	cfg := doctor.Config{
		Endpoint: s3store.ResolveEndpoint(o.remote.Endpoint), Region: firstSet(o.remote.Region, os.Getenv("AWS_REGION")),
		Bucket: loc.Bucket, Prefix: loc.Prefix, Store: st, Credentials: creds, CABundle: os.Getenv("AWS_CA_BUNDLE"),
		Detect: detectOpts, StateDir: base, Cache: storecheck.Cache{Dir: storesDir(base)},
		MultipartSize: store.MinPartSize,
		ControlGroup:  o.controlGroup,
		ControlCheck:  func() error { return agent.CheckControlGroup(base, o.controlGID) },
	}
	var rs []doctor.Result
	if openErr != nil {
		rs = doctor.Unopened(openErr)
	} else {
		rs = doctor.Remote(ctx, cfg)
	}
	rs = append(rs, doctor.Local(ctx, cfg)...)
	if d.from != "" {
		rs = append(rs, runHealth(ctx, o.remote, d, log)...)
	}
	switch {
	case d.json:
		err = doctor.PrintJSON(stdout, rs)
	case o.remote.Quiet:
		err = doctor.PrintProblems(stdout, rs)
	default:
		err = doctor.PrintText(stdout, rs)
	}
	if err != nil {
		return fmt.Errorf("doctor: write the result: %w", err)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	failed := 0
	for _, r := range rs {
		if r.Status == doctor.Fail {
			failed++
		}
	}
	if failed > 0 {
		return doctorFailed{failed, len(rs)}
	}
	return nil
}

func firstSet(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}
