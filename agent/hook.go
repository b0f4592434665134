package agent

import (
	"context"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"
)

// The commit hook (--on-commit): a shell command run after each step this
// agent learns is committed, its own commit or another node's (follow.go),
// to start a pipeline (an evaluation, a notification). Hooks run one at a
// time in a goroutine of their own, off the upload path: a commit only
// queues its hook, never waits for it. When hookQueue hooks already wait,
// the new one is dropped with a warning: a hook slower than the commits
// would otherwise grow the queue without end, and the newest step is in
// the bucket whatever happens to its hook. A hook that fails or runs past
// its timeout is logged at warn; it never stops the agent. At shutdown the
// hooks queued still run, for hookDrain at most after the uploads are
// drained; then the one running is killed and the rest dropped, with a
// warning.

// hookQueue is how many hooks may wait while one runs.
const hookQueue = 4

// DefaultHookTimeout bounds one run of the commit hook.
const DefaultHookTimeout = 10 * time.Minute

// hookDrain bounds the hooks' run after the agent stopped uploading.
const hookDrain = 10 * time.Second

// hookWait is how long a hook's processes have after the kill before the
// hook's output is no longer waited for.
const hookWait = 5 * time.Second

// HookOptions configure the commit hook.
type HookOptions struct {
	// Cmd, when set, is the shell command run after each commit, for at
	// most Timeout (default DefaultHookTimeout), its output to Output
	// (default: stderr).
	Cmd     string
	Timeout time.Duration
	Output  io.Writer
}

// commitEvent is what a hook is told of a commit.
type commitEvent struct {
	step     int64
	files    int
	bytes    int64
	revision int
}

// hooks runs the commit hook.
type hooks struct {
	cmd     string
	timeout time.Duration
	url     string
	out     io.Writer
	log     *zap.Logger

	mu     sync.Mutex
	closed bool
	queue  chan commitEvent
	// stop kills the hook running and drops the rest (set by run).
	stop context.CancelFunc
}

func newHooks(o Options, log *zap.Logger) *hooks {
	if o.OnCommit.Cmd == "" {
		return nil
	}
	h := &hooks{cmd: o.OnCommit.Cmd, timeout: o.OnCommit.Timeout, url: o.URL, out: o.OnCommit.Output, log: log, queue: make(chan commitEvent, hookQueue)}
	if h.timeout <= 0 {
		h.timeout = DefaultHookTimeout
	}
	if h.out == nil {
		h.out = os.Stderr
	}
	return h
}

// enqueue queues the hook of a commit without waiting; it drops it, with
// a warning, when the queue is full or the hooks have stopped.
func (h *hooks) enqueue(ev commitEvent) {
	if h == nil {
		return
	}
	h.mu.Lock()
	queued := false
	if !h.closed {
		select {
		case h.queue <- ev:
			queued = true
		default:
		}
	}
	h.mu.Unlock()
	if !queued {
		h.log.Warn("--on-commit: hooks are behind; not running this step's", zap.Int64("step", ev.step), zap.Int("waiting", hookQueue))
	}
}

// close stops taking hooks; run returns once those queued have run, or
// after hookDrain.
func (h *hooks) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.closed {
		h.closed = true
		close(h.queue)
		if h.stop != nil {
			time.AfterFunc(hookDrain, h.stop)
		}
	}
}

// run runs the queued hooks, one at a time, until close; ctx kills the
// one running (the agent's abort).
func (h *hooks) run(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	h.mu.Lock()
	h.stop = cancel
	if h.closed {
		time.AfterFunc(hookDrain, cancel)
	}
	h.mu.Unlock()
	for ev := range h.queue {
		if ctx.Err() != nil {
			h.log.Warn("--on-commit: stopping; not running this step's hook", zap.Int64("step", ev.step))
			continue
		}
		h.runOne(ctx, ev)
	}
}

func (h *hooks) runOne(ctx context.Context, ev commitEvent) {
	ctx, cancel := context.WithTimeout(ctx, h.timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", h.cmd)
	cmd.Env = append(os.Environ(), "FERRY_STEP="+strconv.FormatInt(ev.step, 10), "FERRY_DESTINATION="+h.url,
		"FERRY_FILES="+strconv.Itoa(ev.files), "FERRY_BYTES="+strconv.FormatInt(ev.bytes, 10), "FERRY_REVISION="+strconv.Itoa(ev.revision))
	cmd.Stdout, cmd.Stderr = h.out, h.out
	killGroup(cmd)
	cmd.WaitDelay = hookWait
	start := time.Now()
	err := cmd.Run()
	took := time.Since(start).Round(time.Millisecond)
	switch {
	case err != nil && ctx.Err() == context.DeadlineExceeded:
		h.log.Warn("--on-commit: hook timed out and was killed", zap.Int64("step", ev.step), zap.Duration("timeout", h.timeout))
	case err != nil:
		h.log.Warn("--on-commit: hook failed", zap.Int64("step", ev.step), zap.Duration("took", took), zap.Error(err))
	default:
		h.log.Debug("--on-commit: hook done", zap.Int64("step", ev.step), zap.Duration("took", took))
	}
}
