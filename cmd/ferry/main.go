// Command ferry makes ML training checkpoints durable in S3-compatible object
// storage (Cloudflare R2 first) and restores them anywhere.
package main

import (
	"context"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

func main() {
	os.Exit(runWithSignals(os.Args))
}

// runWithSignals runs Main with the one signal path of the ferry binary
// (tests re-executing themselves as ferry use it too): the first SIGINT or
// SIGTERM cancels Main's context (commands stop; the agent drains), the
// second closes the context's abort channel (the agent stops at once).
//
// It is also what allows `ferry agent` to re-execute itself at low priority
// (lowerPriority): the program and os.Args that reached here reach here
// again.
func runWithSignals(args []string) int {
	reexecForPriority = true
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	abort := make(chan struct{})
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for n := 0; n < 2; n++ {
			select {
			case <-sigs:
			case <-done:
				return
			}
			if n == 0 {
				cancel()
			} else {
				close(abort)
			}
		}
	})
	code := Main(withAbort(ctx, abort), args, os.Stdout, os.Stderr)
	close(done)
	wg.Wait()
	return code
}

type abortKey struct{}

// withAbort attaches the channel a second signal closes.
func withAbort(ctx context.Context, abort <-chan struct{}) context.Context {
	return context.WithValue(ctx, abortKey{}, abort)
}

// abortOf returns the channel a second signal closes; nil (never) when
// there is none.
func abortOf(ctx context.Context) <-chan struct{} {
	ch, _ := ctx.Value(abortKey{}).(<-chan struct{})
	return ch
}
