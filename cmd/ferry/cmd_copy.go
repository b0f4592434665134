package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"
	"go.uber.org/zap"

	"github.com/ferrylabs/ferry/internal/copier"
	"github.com/ferrylabs/ferry/internal/ratelimit"
	"github.com/ferrylabs/ferry/internal/s3store"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/internal/units"
	"github.com/ferrylabs/ferry/manifest"
)

// The destination's credentials, when they differ from the source's
// and no --to-profile names them.
const (
	envToAccessKey    = "FERRY_TO_AWS_ACCESS_KEY_ID"
	envToSecretKey    = "FERRY_TO_AWS_SECRET_ACCESS_KEY"
	envToSessionToken = "FERRY_TO_AWS_SESSION_TOKEN"
)

// copyMemoryLimit is copy's soft memory limit for the Go runtime: the part
// buffers plus room for the rest.
const copyMemoryLimit = copier.DefaultMemory + 64<<20

type copyOptions struct {
	remote      remoteOptions
	to          remoteOptions // endpoint, region and profile of the destination
	from, dest  string
	step        int64
	last        int
	all         bool
	json        bool
	bandwidth   int64
	concurrency int
	unsafeCond  bool
}

func newCopyCommand() *cli.Command {
	return &cli.Command{
		Name:  "copy",
		Usage: "copy committed steps to another bucket or store (R2 to S3 and back) through memory, every byte checked against the manifest's BLAKE3",
		Description: commandDoc{
			about: "Copies committed steps of the run at --from to --to, another bucket or store: the latest unless told " +
				"--step N, --last N or --all, oldest first. Objects stream through memory, never a local disk; an object whose " +
				"bytes do not match the source's manifest is refused and its step is not committed. Each step's manifest is " +
				"committed at the destination last and create-only, as a push does. Run it again after a stop: it sends only " +
				"what the destination lacks.",
			env: "FERRY_FROM is the source and FERRY_TO the destination, as for the commands that read and write runs: in a " +
				"job environment that sets both for restore and the agent, give --to. The destination's --to-endpoint, " +
				"--to-region and --to-profile default to the source's; its keys come from --to-profile, else " + envToAccessKey +
				", " + envToSecretKey + " and " + envToSessionToken + ", else the source's credentials. Its limits are its own, " +
				"FERRY_COPY_CONCURRENCY and FERRY_COPY_BANDWIDTH (a cap on what it reads).",
			examples: []string{"ferry copy --from s3://r2-bucket/run --to s3://s3-bucket/run --to-endpoint https://s3.us-east-1.amazonaws.com --to-region us-east-1 --all"},
			exits: []string{"0 every step chosen is committed at the destination",
				"1 a step was not copied (the message names it and why)", exit2,
				"3 nothing is committed at --from, or --step N is not committed"},
		}.String(),
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "from", EnvVars: []string{"FERRY_FROM"}, Usage: "source checkpoint location `s3://bucket/prefix` or file:///folder (required)"},
			&cli.StringFlag{Name: "to", EnvVars: []string{"FERRY_TO"}, Usage: "destination checkpoint location `s3://bucket/prefix` or file:///folder (required)"},
			&cli.Int64Flag{Name: "step", Value: -1, Usage: "copy this step (default: the latest committed)"},
			&cli.IntFlag{Name: "last", Usage: "copy the newest `N` committed steps"},
			&cli.BoolFlag{Name: "all", Usage: "copy every committed step"},
			&cli.StringFlag{Name: "to-endpoint", EnvVars: []string{"FERRY_TO_ENDPOINT"}, Usage: "the destination's S3 API `URL` (default: the source's)"},
			&cli.StringFlag{Name: "to-region", EnvVars: []string{"FERRY_TO_REGION"}, Usage: "the destination's region (default: the source's)"},
			&cli.StringFlag{Name: "to-profile", EnvVars: []string{"FERRY_TO_PROFILE"}, Usage: "AWS shared config `profile` for the destination (default: the keys in FERRY_TO_AWS_ACCESS_KEY_ID, FERRY_TO_AWS_SECRET_ACCESS_KEY and FERRY_TO_AWS_SESSION_TOKEN, else the source's credentials)"},
			&cli.BoolFlag{Name: "json", Usage: "print the result as JSON: each step, and the requests made to each store by operation"},
			&cli.StringFlag{Name: "bandwidth", EnvVars: []string{"FERRY_COPY_BANDWIDTH"}, Usage: "cap the rate read from the source, e.g. 800MiB/s (default: unlimited)"},
			&cli.IntFlag{Name: "concurrency", EnvVars: []string{"FERRY_COPY_CONCURRENCY"}, Value: copier.DefaultConcurrency, Usage: "most object requests in flight"},
			conditionalWritesFlag(),
		}, commonFlags()...),
		Action: func(c *cli.Context) error {
			o, err := readCopyOptions(c)
			if err != nil {
				return err
			}
			return runCopy(c.Context, o, c.App.Writer, c.App.ErrWriter)
		},
	}
}

// readCopyOptions reads and checks copy's flags.
func readCopyOptions(c *cli.Context) (copyOptions, error) {
	o := copyOptions{remote: readRemoteOptions(c), from: c.String("from"), dest: c.String("to"), step: c.Int64("step"),
		last: c.Int("last"), all: c.Bool("all"), json: c.Bool("json"), concurrency: c.Int("concurrency"),
		unsafeCond: c.Bool(unsafeConditionalFlag)}
	o.to = o.remote
	for name, v := range map[string]*string{"to-endpoint": &o.to.Endpoint, "to-region": &o.to.Region, "to-profile": &o.to.Profile} {
		if c.IsSet(name) {
			*v = c.String(name)
		}
	}
	if c.Args().Len() > 0 {
		return o, usagef("copy takes no arguments (got %q)", c.Args().First())
	}
	if err := checkStepChoice(c, o.step, o.last, o.all); err != nil {
		return o, err
	}
	if o.concurrency < 1 || o.concurrency > 1024 {
		return o, usagef("--concurrency %d: must be between 1 and 1024", o.concurrency)
	}
	var err error
	o.bandwidth, err = rateFlag(c, "bandwidth")
	return o, err
}

func runCopy(ctx context.Context, o copyOptions, stdout, stderr io.Writer) error {
	log, err := newLogger(o.remote, stderr)
	if err != nil {
		return err
	}
	if err := checkTwoLocations(o); err != nil {
		return err
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		// The part buffers are pooled and bounded (copier.DefaultMemory);
		// without a limit the collector lets the heap reach twice what is
		// live before it runs, most of it the SDK's garbage per request.
		debug.SetMemoryLimit(copyMemoryLimit)
	}
	var fromCount, toCount s3store.Counters
	from, floc, err := openStore(ctx, o.remote, "from", o.from, log, o.concurrency, &fromCount)
	if err != nil {
		return err
	}
	to, tloc, err := openDestination(ctx, o, log, &toCount)
	if err != nil {
		return err
	}
	steps, err := selectSteps(ctx, from, floc, o.step, o.last, o.all)
	if err != nil {
		return fmt.Errorf("copy %s: %w", floc, err)
	}
	slices.Sort(steps) // oldest first: each step deduplicates against the one before
	// --bandwidth caps what copy reads from the source.
	opts := copier.Options{From: ratelimit.Downloads(from, ratelimit.New(o.bandwidth)), To: to, FromPrefix: floc.Prefix,
		ToPrefix: tloc.Prefix, Concurrency: o.concurrency, Logger: log}
	var out []copyStepJSON
	for _, step := range steps {
		res, err := copier.CopyStep(ctx, opts, step)
		if err != nil && !errors.Is(err, copier.ErrSourceCorrupt) && !errors.Is(err, copier.ErrConflict) {
			// Not the step's own fault (a store unreachable, a step not
			// committed, an interrupt): the next steps would fail alike.
			return fmt.Errorf("copy %s to %s: %w", floc, tloc, err)
		}
		r := copyStepJSON{StepResult: res}
		if err != nil {
			r.Error = err.Error()
		}
		out = append(out, r)
		if !o.json {
			printCopyStep(stdout, r, tloc)
		}
	}
	if o.json {
		if err := printJSON(stdout, copyJSON{Steps: out, FromRequests: fromCount.Snapshot(), ToRequests: toCount.Snapshot()}); err != nil {
			return err
		}
	}
	return copyOutcome(floc, tloc, out)
}

// checkTwoLocations fails when --from and --to name the same place.
func checkTwoLocations(o copyOptions) error {
	floc, err := parseLocation("from", o.from)
	if err != nil {
		return err
	}
	tloc, err := parseLocation("to", o.dest)
	if err != nil {
		return err
	}
	if floc == tloc && o.to.Endpoint == o.remote.Endpoint {
		return usagef("--from and --to are both %s: copy needs two locations", floc)
	}
	return nil
}

// openDestination opens the --to store with the destination's endpoint,
// region and credentials.
func openDestination(ctx context.Context, o copyOptions, log *zap.Logger, counters *s3store.Counters) (store.Store, manifest.Location, error) {
	key, secret := os.Getenv(envToAccessKey), os.Getenv(envToSecretKey)
	if o.to.Profile == o.remote.Profile && (key != "") != (secret != "") {
		return nil, manifest.Location{}, usagef("set both %s and %s for the destination, or neither", envToAccessKey, envToSecretKey)
	}
	to := o.to
	if to.Profile == o.remote.Profile && key != "" {
		to.AccessKeyID, to.SecretAccessKey, to.SessionToken = key, secret, os.Getenv(envToSessionToken)
	}
	st, loc, err := openStore(ctx, to, "to", o.dest, log, o.concurrency, counters)
	if err != nil {
		return nil, manifest.Location{}, err
	}
	// A LIST rather than a HEAD of the bucket: a HEAD's answer has no body
	// to tell refused credentials from a missing bucket.
	err = st.List(ctx, manifest.ManifestsPrefix(loc.Prefix), "", 1, func(store.ObjectInfo) error { return nil })
	if err != nil {
		return nil, manifest.Location{}, fmt.Errorf("copy to %s: %w", loc, destinationError{err})
	}
	if err := proveConditionalWrites(ctx, st, to, loc, defaultStateDir(), o.unsafeCond, 1, log); err != nil {
		return nil, manifest.Location{}, fmt.Errorf("copy to %s: %w", loc, destinationError{err})
	}
	return st, loc, nil
}

// destinationError is a failure to open the destination: its fix names
// the destination's own settings.
type destinationError struct{ error }

func (e destinationError) Unwrap() error { return e.error }

// UserReason is the store's reason with where the destination's settings
// come from.
func (e destinationError) UserReason() string {
	var ur interface{ UserReason() string }
	if !errors.As(e.error, &ur) || ur.UserReason() == "" {
		return ""
	}
	return ur.UserReason() + " (the destination's: --to-endpoint, --to-profile, or " + envToAccessKey + " and " + envToSecretKey + ")"
}

// copyStepJSON is one step of copy's result.
type copyStepJSON struct {
	copier.StepResult
	Error string `json:"error,omitempty"`
}

// copyJSON is copy's --json output.
type copyJSON struct {
	Steps []copyStepJSON `json:"steps"`
	// FromRequests and ToRequests count the S3 requests made to each
	// store, by operation, retries included.
	FromRequests map[string]int64 `json:"from_requests"`
	ToRequests   map[string]int64 `json:"to_requests"`
}

// printCopyStep prints one line for a step.
func printCopyStep(w io.Writer, r copyStepJSON, to manifest.Location) {
	switch {
	case r.Error != "":
		fmt.Fprintf(w, "step %d: failed: %s\n", r.Step, oneLine(r.Error))
	case r.AlreadyCommitted && r.Sent == 0:
		fmt.Fprintf(w, "step %d: already at %s\n", r.Step, to)
	default:
		fmt.Fprintf(w, "step %d: copied %s, %s: sent %s (%s); %d deduplicated, %d already there, %s kept from an earlier run\n",
			r.Step, count(r.Files, "file"), units.FormatBytes(r.Bytes), units.FormatBytes(r.BytesSent), count(r.Sent, "object"),
			r.Deduplicated, r.Present, count(r.PartsKept, "part"))
	}
}

// count is "1 file", "2 files".
func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

// errCopyFailed is copy's outcome when a step could not be copied.
var errCopyFailed = errors.New("not copied")

// copyOutcome is nil when every step was copied, else an error naming the
// failed steps (exit 1).
func copyOutcome(from, to manifest.Location, out []copyStepJSON) error {
	var bad []string
	for _, r := range out {
		if r.Error != "" {
			bad = append(bad, strconv.FormatInt(r.Step, 10))
		}
	}
	if len(bad) == 0 {
		return nil
	}
	return fmt.Errorf("copy %s to %s: step %s %w (why is listed above)", from, to, strings.Join(bad, ", "), errCopyFailed)
}
