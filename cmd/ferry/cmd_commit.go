package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/ferrylabs/ferry/agent/control"
)

type commitOptions struct {
	agent   agentSelector
	step    int64
	paths   []string
	wait    bool
	timeout time.Duration
}

func newCommitCommand() *cli.Command {
	return &cli.Command{
		Name:      "commit",
		Usage:     "tell the running agent that step N is complete (the trainer's own word) and wait until it is durable",
		ArgsUsage: "[PATH...]",
		Description: commandDoc{
			about: "Called by the trainer right after a save returns (dcp.save, after async_save's future, HF's on_save, " +
				"Lightning's on_save_checkpoint): the agent commits step N as soon as its files are closed with no writer, " +
				"without the settle window and whatever its layout would have guessed. PATHs (files or folders below the " +
				"watch dir, or relative to it) name the step's files; without them the layout's step N is taken.",
			env:      "FERRY_STATE_DIR, FERRY_WATCH and FERRY_TO name the agent as they did when it was started.",
			examples: []string{"ferry commit --step 1200 --watch /nvme/ckpt step-1200"},
			exits: []string{"0 durable (with --no-wait: the agent took the declaration)",
				"1 not durable: no such step on disk, a file still open for writing at --timeout, the step committed " +
					"before with other content, or no agent answers (or several do and --watch and --to pick none)", exit2},
		}.String(),
		Flags: append([]cli.Flag{
			&cli.Int64Flag{Name: "step", Usage: "the step number the trainer completed (required)", Required: true},
			&cli.BoolFlag{Name: "no-wait", Usage: "return once the agent took the declaration, without waiting for the step to be durable"},
			&cli.DurationFlag{Name: "timeout", Value: 10 * time.Minute, EnvVars: []string{"FERRY_COMMIT_TIMEOUT"}, Usage: "give up waiting after this long (0: as long as it takes)"},
		}, selectorFlags()...),
		Action: func(c *cli.Context) error {
			o := commitOptions{agent: readSelector(c), step: c.Int64("step"), paths: c.Args().Slice(),
				wait: !c.Bool("no-wait"), timeout: c.Duration("timeout")}
			if o.step < 0 {
				return usagef("--step %d: a step is a number >= 0", o.step)
			}
			if o.timeout < 0 {
				return usagef("--timeout %v: must not be negative", o.timeout)
			}
			return runCommit(c.Context, o, c.App.Writer)
		},
	}
}

func runCommit(ctx context.Context, o commitOptions, stdout io.Writer) error {
	dir, err := o.agent.locate()
	if err != nil {
		return err
	}
	if err := control.Dial(dir).Commit(ctx, o.step, o.paths, o.wait, o.timeout); err != nil {
		return err
	}
	if o.wait {
		fmt.Fprintln(stdout, "step "+strconv.FormatInt(o.step, 10)+" is durable")
	} else {
		fmt.Fprintln(stdout, "step "+strconv.FormatInt(o.step, 10)+" declared complete; the agent commits it once its files are closed")
	}
	return nil
}
