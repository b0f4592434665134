package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/ferrylabs/ferry/agent/control"
	"github.com/urfave/cli/v2"
)

type flushOptions struct {
	agent   agentSelector
	timeout time.Duration
	quiet   bool
}

func newFlushCommand() *cli.Command {
	return &cli.Command{
		Name:  "flush",
		Usage: "wait until the running agent has committed every checkpoint it has seen; exit 1 naming the steps that are not",
		Description: commandDoc{
			about: "Waits until the agent running on this machine has committed every complete checkpoint it has seen, so " +
				"that a job script knows its work is durable before the node goes away. Run it after training ends, then stop " +
				"the agent.",
			env:      "FERRY_STATE_DIR, FERRY_WATCH and FERRY_TO name the agent as they did when it was started.",
			examples: []string{"ferry flush --timeout 15m && kill -TERM \"$agent\""},
			exits: []string{"0 every complete step the agent has seen is committed",
				"1 a step is not committed by --timeout, or failed (the message names each), or no agent answers (or several do and --watch and --to pick none)", exit2},
		}.String(),
		Flags: append([]cli.Flag{
			&cli.DurationFlag{Name: "timeout", Value: 15 * time.Minute, EnvVars: []string{"FERRY_FLUSH_TIMEOUT"}, Usage: "give up after this long (0: wait as long as it takes)"},
		}, selectorFlags()...),
		Action: func(c *cli.Context) error {
			if c.Args().Len() > 0 {
				return usagef("flush takes no arguments (got %q)", c.Args().First())
			}
			o := flushOptions{agent: readSelector(c), timeout: c.Duration("timeout"), quiet: c.Bool("quiet")}
			if o.timeout < 0 {
				return usagef("--timeout %v: must not be negative", o.timeout)
			}
			return runFlush(c.Context, o, c.App.Writer, c.App.ErrWriter)
		},
	}
}

func runFlush(ctx context.Context, o flushOptions, stdout, stderr io.Writer) error {
	dir, err := o.agent.locate()
	if err != nil {
		return err
	}
	cl := control.Dial(dir)
	if isTerminal(stderr) && !o.quiet {
		fmt.Fprintf(stderr, "waiting for the agent to commit every step it has seen (timeout %v)\n", o.timeout)
	}
	// A *control.NotCommittedError names the steps; exitCode prints it as
	// the one line a job script shows.
	if _, err := cl.Flush(ctx, o.timeout); err != nil {
		return err
	}
	st, err := cl.Status(ctx)
	if err != nil {
		// Everything is committed; the agent may have exited since.
		fmt.Fprintln(stdout, "all steps committed")
		return nil
	}
	var committed, abandoned int
	var lost []string
	for _, s := range st.Steps {
		switch s.State {
		case control.StateLost:
			lost = append(lost, fmt.Sprint(s.Step))
		case control.StateCommitted, control.StateNodeDone:
			// node-done: this node's share is durable; the step commits
			// when the other nodes' shares are.
			committed++
		case control.StateAbandoned:
			abandoned++
		}
	}
	// Which agent answered, so a job script's log shows it was its own.
	who := ": " + st.Watch + " -> " + st.Destination
	if len(lost) > 0 {
		// Not a failure of the run's durability (what is on disk is
		// committed), but never silent: these were complete and are gone.
		defer fmt.Fprintf(stdout, "lost: step %s complete on disk but deleted before it could be uploaded (see the agent's log)\n", strings.Join(lost, ", "))
	}
	switch {
	case committed == 0 && abandoned == 0:
		fmt.Fprintln(stdout, "nothing to flush: the agent has seen no complete step yet"+who)
	case committed == 0:
		fmt.Fprintf(stdout, "nothing committed: %d abandoned steps were deleted before they were durable%s\n", abandoned, who)
	case abandoned > 0:
		fmt.Fprintf(stdout, "%s (last committed step %d; %d abandoned: deleted before they were durable)%s\n", allCommitted(committed), st.LastCommitted, abandoned, who)
	default:
		fmt.Fprintf(stdout, "%s (last committed step %d)%s\n", allCommitted(committed), st.LastCommitted, who)
	}
	return nil
}

func allCommitted(n int) string {
	if n == 1 {
		return "1 step committed"
	}
	return fmt.Sprintf("all %d steps committed", n)
}
