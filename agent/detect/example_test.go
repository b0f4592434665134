package detect_test

import (
	"context"
	"errors"
	"fmt"

	"golang.org/x/sync/errgroup"

	"github.com/ferrylabs/ferry/agent/detect"
)

// The agent runs the watcher in its errgroup and consumes events in
// another goroutine of the same group.
func ExampleWatcher_Run() {
	w, err := detect.New(detect.Options{Dir: "/scratch/ckpt", Layout: "auto"})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	g, ctx := errgroup.WithContext(ctx)
	events := make(chan detect.Event)
	g.Go(func() error { return w.Run(ctx, events) })
	g.Go(func() error {
		for {
			select {
			case <-ctx.Done():
				return nil
			case ev := <-events:
				switch ev.Kind {
				case detect.Complete:
					// skip a step committed before (every step is
					// reported at start); number a counted one; upload ev.Step.Files, ev.Step.Symlinks and
					// ev.Step.Generated, then commit; on failure keep
					// ev.Step and retry it (it is reported once).
				case detect.Deleted:
					// abort an upload of ev.Step in progress; do not commit.
					_ = errors.Is(ev.Err, detect.ErrChanged)
				case detect.Error:
					// report ev.Err; Complete follows once the step is readable.
				}
			}
		}
	})
	cancel() // in the agent: on SIGTERM
	_ = g.Wait()
}
