// Package ctxtime waits for a duration or a context, whichever ends first.
package ctxtime

import (
	"context"
	"time"
)

// Sleep waits for d, or returns ctx's error as soon as ctx is done.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
