// Command ferry-trainsim is a simulated training job for ferry's demo and
// tests: each rank writes its checkpoint files in place, slowly, at the given
// steps, using Composer's file names (see internal/trainsim).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ferrylabs/ferry/internal/trainsim"
	"github.com/ferrylabs/ferry/internal/units"
)

func main() {
	var o trainsim.Options
	dir := flag.String("dir", "", "checkpoint directory (required)")
	steps := flag.String("steps", "100", "comma-separated steps to checkpoint")
	size := flag.String("size", "16MiB", "bytes per rank file")
	chunk := flag.String("chunk", "1MiB", "write size between pauses")
	flag.IntVar(&o.Ranks, "ranks", 2, "ranks (files per step)")
	flag.DurationVar(&o.Pause, "pause", 20*time.Millisecond, "pause between chunks")
	interval := flag.Duration("interval", 0, "time between checkpoints (training)")
	flag.Int64Var(&o.Seed, "seed", 1, "content seed")
	flag.Parse()
	fail := func(err error) { fmt.Fprintln(os.Stderr, "ferry-trainsim:", err); os.Exit(2) }
	if *dir == "" {
		fail(fmt.Errorf("--dir is required"))
	}
	o.Dir = *dir
	var err error
	if o.FileSize, err = units.ParseBytes(*size); err != nil {
		fail(fmt.Errorf("--size: %w", err))
	}
	if o.Chunk, err = units.ParseBytes(*chunk); err != nil {
		fail(fmt.Errorf("--chunk: %w", err))
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	for i, s := range strings.Split(*steps, ",") {
		step, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
		if err != nil {
			fail(fmt.Errorf("--steps: %q is not a step", s))
		}
		if i > 0 && *interval > 0 {
			select {
			case <-ctx.Done():
				os.Exit(1)
			case <-time.After(*interval):
			}
		}
		if err := trainsim.WriteStep(ctx, o, step); err != nil {
			fmt.Fprintln(os.Stderr, "ferry-trainsim:", err)
			os.Exit(1)
		}
		fmt.Printf("trainer: wrote checkpoint step %d (%d ranks x %s)\n", step, o.Ranks, units.FormatBytes(o.FileSize))
	}
}
