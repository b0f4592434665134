package agent

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/agent/control"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/internal/trainsim"
)

// A flush while the agent is still starting (its listing of the bucket
// blocked: the server is down) does not answer "nothing to flush": it
// waits, and says the agent is starting if its time runs out. Once the
// bucket answers, the same flush sees the step committed.
func TestFlushWaitsForTheAgentToStart(t *testing.T) {
	release := make(chan struct{})
	var once sync.Once
	h := startAgent(t, func(o *Options) {
		o.Detect.ExpectedRanks = 1
		o.Store = &store.Faulty{Inner: o.Store, Before: func(op, _ string) error {
			if op == "List" {
				<-release
			}
			return nil
		}}
	})
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	sim := trainsim.Options{Dir: h.watch, Ranks: 1, FileSize: 1 << 20, Seed: 3}
	if err := trainsim.WriteStep(context.Background(), sim, 1); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	if _, err := h.agent.Flush(ctx); !errors.Is(err, control.ErrStarting) {
		t.Fatalf("flush while the agent starts: %v, want ErrStarting", err)
	}
	once.Do(func() { close(release) })
	if left := h.flush(60 * time.Second); len(left) != 0 {
		t.Fatalf("not committed: %v", left)
	}
	if got := h.committedSteps(); len(got) != 1 || got[0] != 1 {
		t.Fatalf("committed %v, want [1]", got)
	}
}
