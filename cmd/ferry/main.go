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
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := Main(ctx, os.Args, os.Stdout, os.Stderr)
	cancel()
	os.Exit(code)
}
