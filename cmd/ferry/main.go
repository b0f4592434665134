// Command ferry makes ML training checkpoints durable in S3-compatible object
// storage (Cloudflare R2 first) and restores them anywhere.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	os.Exit(runWithSignals(os.Args))
}

// runWithSignals runs Main with SIGINT and SIGTERM cancelling its context,
// as the ferry binary does (tests re-executing themselves as ferry use it
// too).
func runWithSignals(args []string) int {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	return Main(ctx, args, os.Stdout, os.Stderr)
}
