package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/ferrylabs/ferry/agent/control"
	"github.com/ferrylabs/ferry/internal/units"
)

type statusOptions struct {
	agent agentSelector
	json  bool
}

func newStatusCommand() *cli.Command {
	return &cli.Command{
		Name:  "status",
		Usage: "show what the running agent has seen: pending, uploading and committed steps, bytes, rate, last error",
		Description: commandDoc{
			about: "Asks the agent running on this machine, over its control socket under the state dir, what it has seen: " +
				"steps pending, uploading and committed, bytes, rate, the last error. With several agents under one state dir, " +
				"--watch or --to picks one. An agent still waiting for its watch dir to be created has no socket yet.",
			env:      "FERRY_STATE_DIR, FERRY_WATCH and FERRY_TO name the agent as they did when it was started.",
			examples: []string{"ferry status --watch /nvme/ckpt"},
			exits:    []string{"0 the agent answered", "1 no agent answers at the state dir, or several do and --watch and --to pick none (the message names them)", exit2},
		}.String(),
		Flags: append([]cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "print the agent's status as JSON"},
		}, selectorFlags()...),
		Action: func(c *cli.Context) error {
			if c.Args().Len() > 0 {
				return usagef("status takes no arguments (got %q)", c.Args().First())
			}
			return runStatus(c.Context, statusOptions{agent: readSelector(c), json: c.Bool("json")}, c.App.Writer)
		},
	}
}

func runStatus(ctx context.Context, o statusOptions, stdout io.Writer) error {
	dir, err := o.agent.locate()
	if err != nil {
		return err
	}
	st, err := control.Dial(dir).Status(ctx)
	if err != nil {
		return err
	}
	if o.json {
		return printJSON(stdout, st)
	}
	return printStatus(stdout, st, time.Now())
}

// printStatus writes a header line about the agent and a table of steps:
// those found on disk but not complete yet (settling, waiting), then those
// the agent took on.
func printStatus(w io.Writer, st control.Status, now time.Time) error {
	last := "none"
	if st.LastCommitted >= 0 {
		last = fmt.Sprint(st.LastCommitted)
	}
	window := st.RateWindowSeconds
	if window <= 0 {
		window = 60
	}
	fmt.Fprintf(w, "%s -> %s (layout %s)  last committed %s  rate %s/s (last %ds)  sent %s  up %s",
		st.Watch, st.Destination, orDash(st.Layout), last, units.FormatBytes(int64(st.Rate)), window,
		units.FormatBytes(st.BytesSent), now.Sub(st.Started).Round(time.Second))
	if st.Draining {
		fmt.Fprint(w, "  draining")
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "state %s  metrics %s\n", st.StateDir, orValue(st.MetricsAddr, "off"))
	if st.LastError != "" {
		fmt.Fprintf(w, "last error: %s\n", oneLine(st.LastError))
	}
	if st.Unrecognized != "" {
		fmt.Fprintf(w, "warning: %s\n", st.Unrecognized)
	}
	if len(st.Steps) == 0 && len(st.Settling) == 0 {
		fmt.Fprintln(w, "no complete step seen yet")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STEP\tSTATE\tFILES\tBYTES\tSENT\tDETECTED\tCOMMITTED\tERROR")
	for _, p := range st.Settling {
		step := fmt.Sprint(p.Step)
		if p.Step < 0 {
			step = orDash(p.Root)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t-\t-\t-\t%s\n", step, p.State, p.Files, units.FormatBytes(p.Bytes), truncate(oneLine(p.Reason), 120))
	}
	for _, s := range st.Steps {
		printStepRow(tw, s)
	}
	return tw.Flush()
}

// printStepRow writes one step the agent took on.
func printStepRow(tw io.Writer, s control.StepStatus) {
	committed := "-"
	if !s.Committed.IsZero() {
		// How long the step took to become durable says more than a
		// second timestamp; counted from the trainer's last write.
		from := s.LastWrite
		if from.IsZero() {
			from = s.Detected
		}
		committed = "+" + s.Committed.Sub(from).Round(100*time.Millisecond).String()
	}
	errText := oneLine(s.Error)
	if errText != "" && s.Attempts > 1 {
		errText = fmt.Sprintf("attempt %d: %s", s.Attempts, errText)
	}
	fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", s.Step, s.State, s.Files,
		units.FormatBytes(s.Bytes), units.FormatBytes(s.BytesSent),
		s.Detected.Local().Format("2006-01-02 15:04:05"), committed, truncate(errText, 120))
}

func orValue(s, none string) string {
	if s == "" {
		return none
	}
	return s
}

func orDash(s string) string { return orValue(s, "-") }

// truncate keeps a table row on one screen line; --json has the full text.
func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return strings.TrimSpace(string(r[:n-1])) + "…"
}
