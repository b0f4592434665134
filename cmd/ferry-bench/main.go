// Command ferry-bench measures ferry against aws-cli and s5cmd on one
// machine, and ferry's agent, peers and behaviour across a slow link
// (internal/bench). Run it through `make bench` (or `make bench
// BENCH_QUICK=1`), which builds every tool first; README.md beside this
// file says what is measured and how.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/ferrylabs/ferry/internal/bench"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == bench.TrainerSimFlag {
		// The interference phase's trainer, run as a child of the bench.
		if err := bench.TrainerSim(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "trainer-sim:", err)
			os.Exit(1)
		}
		return
	}
	cfg, err := bench.ParseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "ferry-bench:", err)
		os.Exit(2)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	if err := bench.Run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "ferry-bench:", err)
		cancel()
		os.Exit(1)
	}
}
