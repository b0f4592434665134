package main

import (
	"context"
	"fmt"

	"go.uber.org/zap"

	"github.com/ferrylabs/ferry/internal/priority"
)

// reexecForPriority allows lowerPriority to re-execute the process. Only
// runWithSignals sets it: the entry of the ferry binary and of test
// binaries acting as ferry, whose arguments lead back to it. Main called
// in-process by a test leaves it unset and lowers in place instead.
var reexecForPriority bool

// lowerPriority makes the whole agent yield CPU and disk to the trainer
// (internal/priority). Where it may, it lowers the calling thread and
// re-executes ferry with the same arguments and environment (systemd's
// NOTIFY_SOCKET and WATCHDOG_PID included; the process ID stays), so that
// every thread of the agent that then runs starts lowered; that agent
// comes back here, sees it was re-executed, and only confirms. Otherwise
// it lowers the threads in place, which can miss one the Go runtime is
// starting meanwhile. A refusal is a warning: the agent still uploads.
func lowerPriority(ctx context.Context, log *zap.Logger) {
	// Reexecuted also drops the marker from the environment, so that
	// nothing the agent starts inherits it.
	reexecuted := priority.Reexecuted()
	// A SIGINT or SIGTERM received already has cancelled ctx, and a new
	// image would not know of it: then lower in place.
	if !reexecuted && reexecForPriority && ctx.Err() == nil {
		err := priority.Reexec() // returns only when it could not
		log.Warn("could not re-execute the agent at low priority; lowering its threads in place, where one started meanwhile can keep the caller's priority",
			zap.Error(err))
	}
	a, err := priority.Lower()
	if err != nil {
		log.Warn("could not lower the agent's priority; it runs at the trainer's", zap.Error(err))
		return
	}
	log.Info("running at low priority (--priority normal to keep the caller's)", zap.String("cpu", a.CPU),
		zap.String("io", fmt.Sprintf("best-effort %d", a.IOLevel)), zap.Int("threads", a.Threads),
		zap.Bool("reexecuted", reexecuted))
}
