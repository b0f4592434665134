package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/ferrylabs/ferry/internal/remote"
)

// Exit codes, documented in the README.
const (
	exitOK           = 0
	exitFailure      = 1
	exitUsage        = 2
	exitNoCheckpoint = 3
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// usageError marks an error in how ferry was called (exit 2).
type usageError struct{ msg string }

// interruptedError is a command stopped by a signal, with what to do next.
type interruptedError struct{ hint string }

func (e interruptedError) Error() string { return "interrupted: " + e.hint }
func (e interruptedError) Unwrap() error { return context.Canceled }

// helpHint points to the help of the command that was run.
func helpHint(cmd string) string {
	if cmd == "" {
		return "ferry --help"
	}
	return "ferry " + cmd + " --help"
}

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return usageError{msg: fmt.Sprintf(format, args...)}
}

// Main runs ferry with args (args[0] is the program name) and returns the
// process exit code. It never calls os.Exit, so tests can call it.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	app := &cli.App{
		Name:    "ferry",
		Usage:   "make training checkpoints durable in S3-compatible storage and restore them anywhere",
		Version: version,
		Description: commandDoc{
			about: "ferry runs beside a training job: `ferry agent` uploads each checkpoint the trainer finishes and commits " +
				"it; `ferry restore`, on any node, brings the latest committed one back, every byte verified. `ferry COMMAND " +
				"--help` describes each command, with an example and its exit codes.",
			env: "Every flag that sets how ferry runs has an environment variable, listed with it, and each variable means " +
				"one thing in every command that reads it: FERRY_FROM the run a command reads, FERRY_TO the run it writes " +
				"(copy: the destination; status, flush and commit: the agent's), FERRY_CONCURRENCY requests in flight and " +
				"FERRY_BANDWIDTH the cap on what this node sends (push and the agent; verify and copy have FERRY_VERIFY_* and " +
				"FERRY_COPY_*). The store: --endpoint (S3_ENDPOINT_URL) and the standard AWS credential chain.",
			examples: []string{"ferry restore --from s3://my-bucket/run --to /nvme/ckpt --allow-empty",
				"ferry agent --watch /nvme/ckpt --to s3://my-bucket/run &"},
			exits: []string{"0 success", exit1, exit2, exit3 + " (restore, show, verify, copy)"},
		}.String(),
		Writer:               stdout,
		ErrWriter:            stderr,
		EnableBashCompletion: false,
		HideHelpCommand:      true,
		ExitErrHandler:       func(*cli.Context, error) {},
		OnUsageError: func(_ *cli.Context, err error, _ bool) error {
			return usageError{msg: err.Error()}
		},
		Commands: []*cli.Command{
			newPushCommand(),
			newRestoreCommand(),
			newFollowCommand(),
			newListCommand(),
			newShowCommand(),
			newVerifyCommand(),
			newCopyCommand(),
			newStatusCommand(),
			newFlushCommand(),
			newCommitCommand(),
			newPruneCommand(),
			newAgentCommand(),
			newDoctorCommand(),
			newVersionCommand(),
		},
	}
	known := map[string]*cli.Command{}
	for _, c := range app.Commands {
		c.OnUsageError = func(_ *cli.Context, err error, _ bool) error { return explainUsage(c, err) }
		known[c.Name] = c
	}
	name := ""
	if len(args) > 1 && !strings.HasPrefix(args[1], "-") && args[1] != "help" && args[1] != "h" {
		c := known[args[1]]
		if c == nil {
			return exitCode(usagef("unknown command %q", args[1]), "", stderr)
		}
		name = c.Name
		args = append(args[:2:2], flagsFirst(c, args[2:])...)
	}
	err := app.RunContext(ctx, args)
	return exitCode(err, name, stderr)
}

// exitCode prints err as one line and maps it to an exit code; cmd is the
// command that was run, for the help hint of a usage error.
func exitCode(err error, cmd string, stderr io.Writer) int {
	if err == nil {
		return exitOK
	}
	var ue usageError
	switch {
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "ferry: %s (see %s)\n", oneLine(err.Error()), helpHint(cmd))
		return exitUsage
	case errors.Is(err, remote.ErrNoCheckpoint):
		fmt.Fprintf(stderr, "ferry: %s\n", oneLine(err.Error()))
		return exitNoCheckpoint
	case errors.Is(err, context.Canceled):
		var ie interruptedError
		if errors.As(err, &ie) {
			fmt.Fprintf(stderr, "ferry: interrupted: %s\n", ie.hint)
		} else {
			fmt.Fprintln(stderr, "ferry: interrupted")
		}
		return exitFailure
	default:
		fmt.Fprintf(stderr, "ferry: %s\n", shortLine(err))
		return exitFailure
	}
}

// shortLine is err as one line. When the cause is something the user must
// fix (a bucket, the region, credentials, the endpoint), it is the command's
// own context followed by that fix, without the chain of operations and
// keys in between (the log at debug level has them).
func shortLine(err error) string {
	var ur interface{ UserReason() string }
	full := oneLine(err.Error())
	if !errors.As(err, &ur) || ur.UserReason() == "" {
		return full
	}
	head, _, _ := strings.Cut(full, ": ")
	return head + ": " + oneLine(ur.UserReason())
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
