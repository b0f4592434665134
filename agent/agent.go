// Package agent is ferry's background process: it watches a checkpoint
// directory, uploads each step once it is completely written (when several
// wait, newest first unless --when-behind says otherwise), commits the
// step's manifest when all its files are durable, and optionally applies
// local retention. It holds the policy; detection is in agent/detect, the
// mechanics of uploading in uploader.
//
// Data flows one way: watcher -> queue -> uploader -> committer. The queue
// lives in memory; what must survive a crash is on disk in the state dir:
// the uploader's per-step state files (multipart uploads in flight) and the
// journal of committed steps. After SIGKILL the watcher's start-up scan
// finds the steps again, committed ones are skipped, and unfinished uploads
// resume where they stopped.
//
// This package is ferry's implementation, used by cmd/ferry and ferry's
// other packages. It is importable, but its API carries no stability
// promise; the supported public API is package manifest (the remote format).
package agent

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/ferrylabs/ferry/agent/control"
	"github.com/ferrylabs/ferry/agent/detect"
	"github.com/ferrylabs/ferry/internal/remote"
)

// Agent uploads checkpoint steps as they are completed on disk.
type Agent struct {
	opts    Options
	log     *zap.Logger
	journal *journal
	watcher *detect.Watcher
	wl      *watchLoop
	pipe    *pipeline // nil without Options.Pipeline
	started time.Time

	mu      sync.Mutex
	steps   map[int64]*entry
	changed chan struct{} // closed and replaced on every state change
	// watching closes once Run has listed the bucket's committed steps and
	// started the watcher: before it, the agent has seen nothing, and a
	// flush cannot know what it should wait for.
	watching chan struct{}
	// handled counts the watcher's events handled so far (Flush waits for
	// those its sync with the watcher reported sent).
	handled atomic.Int64
	// recording counts the steps durable whose journal entry is still
	// being written (recordCommitted).
	recording int
	lastErr   string
	watchErr  string // the watcher's error in lastErr, while it lasts
	// remote holds the steps committed in the bucket when the agent started.
	remote map[int64]bool
	// follows holds the node-done steps whose commit by another node this
	// agent looks for (follow.go).
	follows map[int64]*followState
	// counter is the number the next counted step (detect.Step.Counted)
	// gets: above every step committed here or in the bucket, so a new
	// file never takes a committed step's number. counted maps the
	// watcher's ID of each counted step to the number it was given.
	counter int64
	counted map[string]int64
	// byTrainer holds the steps the trainer declared complete (Commit)
	// until they are durable.
	byTrainer map[int64]*trainerCommit
	// commitWaits counts Commit calls in progress (MaxWaitingCommits).
	commitWaits atomic.Int32
	// heldLogged holds the steps declared ahead whose holding out of
	// retention was logged (retention_hold.go).
	heldLogged map[int64]bool

	wake     chan struct{}
	draining atomic.Bool
	// beat is when Run's loop last turned (unix nanoseconds; 0 before it
	// runs): Alive.
	beat atomic.Int64
	// running is set while Run's loops (watcher, worker) run: Ready.
	running atomic.Bool
	// answers records the store's answers (answerStore): Ready.
	answers *storeAnswers
	abort   context.CancelFunc
	traffic traffic
	hooks   *hooks // nil without Options.OnCommit
	// followWake tells the follower a step became node-done (follow.go).
	followWake chan struct{}
	// served caches the manifests of committed steps Holdings read, so
	// that peers asking for plans cost the bucket one GET per step.
	served manifestCache
}

// entry is the agent's record of one step.
type entry struct {
	status   control.StepStatus
	step     detect.Step
	complete time.Time // when the step was found complete on disk
	nextTry  time.Time
	lastTry  time.Time          // when the last upload attempt started
	cancel   context.CancelFunc // set while uploading
	deleted  bool               // the trainer removed or changed it mid-upload
	cleanup  bool               // abandoned: its upload state must be discarded
	// revise: this agent committed the step before with other files; the
	// upload publishes the files on disk now as its next revision.
	revise bool
	// early is what the pipeline sent of the step while it was written.
	early int64
}

// lastWrite is when the trainer last wrote the step: its newest file's
// modification time (the last write comes just before the last close),
// or when it was found complete if that is earlier or unknown.
func (e *entry) lastWrite() time.Time {
	var last time.Time
	for _, f := range e.step.Files {
		if f.ModTime.After(last) {
			last = f.ModTime
		}
	}
	if last.IsZero() || last.After(e.complete) {
		return e.complete
	}
	return last
}

// New checks the options and prepares the state dir (mode 0700) and the
// watcher. It makes no request.
func New(opts Options) (*Agent, error) {
	if opts.Store == nil || opts.StateDir == "" || opts.Detect.Dir == "" {
		return nil, errors.New("agent: Store, StateDir and Detect.Dir are required")
	}
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	answers := &storeAnswers{}
	opts.Store = answerStore{Store: opts.Store, answers: answers}
	opts.Detect.Nodes = opts.Nodes
	if err := PrepareStateDir(opts.StateDir); err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	if err := ClaimStateDir(opts.StateDir, opts.identity()); err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	j, err := openJournal(opts.StateDir)
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	a := &Agent{
		opts:       opts,
		log:        opts.Logger,
		journal:    j,
		steps:      map[int64]*entry{},
		changed:    make(chan struct{}),
		watching:   make(chan struct{}),
		wake:       make(chan struct{}, 1),
		followWake: make(chan struct{}, 1),
		remote:     map[int64]bool{},
		counted:    map[string]int64{},
		byTrainer:  map[int64]*trainerCommit{},
		heldLogged: map[int64]bool{},
		answers:    answers,
	}
	a.traffic.metrics = opts.Metrics
	a.hooks = newHooks(opts, opts.Logger)
	opts.Metrics.SetLastCommitTime(j.lastCommitTime())
	a.counter = a.lastCommitted() + 1
	dopts := opts.Detect
	dopts.Logger = opts.Logger
	dopts.Linked = dopts.Linked || j.linked()
	dopts.ReportWriting = opts.Pipeline
	if opts.Pipeline {
		a.pipe = newPipeline(pipelineConfig{dest: a.destination(), upload: opts.Upload, progress: earlyProgress{t: &a.traffic}, log: a.log})
	}
	if a.watcher, err = detect.New(dopts); err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	a.wl = newWatchLoop(a)
	opts.Metrics.Observe(a.stepGauges)
	return a, nil
}

// uploadStateDir holds the uploader's per-step state files.
func (a *Agent) uploadStateDir() string { return filepath.Join(a.opts.StateDir, "uploads") }

// Run watches and uploads until ctx is cancelled; then it stops watching,
// keeps uploading the steps already found complete for up to DrainTimeout
// (or until Abort), and returns nil. Upload state is on disk at every
// moment, so an interrupted drain resumes at the next start.
//
// A watch dir that cannot be listed for a while is watched again once it
// can (watchLoop); any other failure of the watcher ends Run at once with
// the error, logged: the agent never goes on blind.
func (a *Agent) Run(ctx context.Context) error {
	a.started = time.Now()
	hard, abort := context.WithCancel(context.WithoutCancel(ctx))
	defer abort()
	a.mu.Lock()
	a.abort = abort
	a.mu.Unlock()

	if err := a.loadRemote(ctx); err != nil {
		if ctx.Err() != nil {
			// Stopped while starting: nothing found yet, nothing to drain.
			return nil
		}
		return err
	}
	a.running.Store(true)
	defer a.running.Store(false)
	err := a.runLoops(ctx, hard, abort)
	if err != nil {
		a.log.Error("agent stopped by an error", zap.Error(err))
	}
	return err
}

// runLoops runs the watcher, the pipeline and the worker in one errgroup,
// and the loop handling the watcher's events here. ctx ending stops the
// watching and begins the drain; an error of any of them (or Abort)
// cancels the others, and is returned once all have returned.
func (a *Agent) runLoops(ctx, hard context.Context, abort context.CancelFunc) error {
	g, gctx := errgroup.WithContext(hard)
	watchCtx, stopWatch := context.WithCancel(gctx)
	defer stopWatch()
	defer context.AfterFunc(ctx, stopWatch)()
	events := make(chan detect.Event)
	watchDone, workerDone := make(chan struct{}), make(chan struct{})
	g.Go(func() error {
		defer close(watchDone)
		return a.wl.run(watchCtx, events)
	})
	if a.pipe != nil {
		g.Go(func() error { a.pipe.run(watchCtx); return nil })
	}
	g.Go(func() error {
		defer close(workerDone)
		a.work(gctx)
		return nil
	})
	// The follower looks for commits other nodes made, on its own: a
	// stalled HEAD never holds up an upload (follow.go).
	g.Go(func() error { a.followLoop(watchCtx); return nil })
	hooksDone := make(chan struct{})
	if a.hooks != nil {
		g.Go(func() error { defer close(hooksDone); a.hooks.run(hard); return nil })
	} else {
		close(hooksDone)
	}

	select { // "started" means watching: what is written from now on is seen
	case <-a.watcher.Ready():
	case <-a.wl.down: // the watch dir is unavailable: retried, and said so
	case <-watchDone:
	case <-ctx.Done():
	}
	a.log.Info("agent started", zap.String("watch", a.opts.Detect.Dir), zap.String("to", a.opts.URL),
		zap.String("layout", a.watcher.LayoutName()), zap.String("state_dir", a.opts.StateDir))
	close(a.watching)
	a.loop(events, watchDone)
	if ctx.Err() != nil && gctx.Err() == nil {
		a.drain(hard, abort, workerDone)
	}
	if a.hooks != nil {
		a.hooks.close() // the queued hooks run, for hookDrain at most
		if gctx.Err() == nil {
			<-hooksDone
		}
	}
	abort() // the worker stops too: nothing outlives Run
	return g.Wait()
}

// loop handles the watcher's events until the watching goroutine returns,
// turning every loopTick to show it is alive (FeedWatchdog).
func (a *Agent) loop(events <-chan detect.Event, watchDone <-chan struct{}) {
	tick := time.NewTicker(loopTick)
	defer tick.Stop()
	for {
		a.beatLoop()
		select {
		case ev := <-events:
			a.wl.back()
			a.handle(ev)
			a.handled.Add(1)
		case <-tick.C:
			if a.watcher.Watching() {
				a.wl.back()
			}
		case <-watchDone:
			return
		}
	}
}

// drain lets the worker finish the queue, bounded by DrainTimeout.
func (a *Agent) drain(hard context.Context, abort context.CancelFunc, workerDone <-chan struct{}) {
	a.draining.Store(true)
	a.notify()
	pending := a.unfinished()
	if len(pending) > 0 {
		a.log.Info("draining: finishing uploads before exit", zap.Int64s("steps", pending), zap.Duration("timeout", a.opts.DrainTimeout))
	}
	t := time.NewTimer(a.opts.DrainTimeout)
	defer t.Stop()
	select {
	case <-workerDone:
	case <-t.C:
		a.log.Warn("drain timeout: stopping uploads; they resume at the next start", zap.Int64s("steps", a.unfinished()))
		abort()
		<-workerDone
	case <-hard.Done():
		<-workerDone
	}
}

// Abort stops uploads at once (a second signal); state stays on disk.
func (a *Agent) Abort() {
	a.mu.Lock()
	abort := a.abort
	a.mu.Unlock()
	if abort != nil {
		abort()
	}
}

// loadRemote lists the steps already committed in the bucket.
func (a *Agent) loadRemote(ctx context.Context) error {
	steps, err := remote.Steps(ctx, a.opts.Store, a.opts.Prefix, 0)
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	newest := int64(-1)
	a.mu.Lock()
	for _, s := range steps {
		a.remote[s] = true
		newest = max(newest, s)
	}
	a.counter = max(a.counter, newest+1)
	a.mu.Unlock()
	return nil
}

// changedLocked wakes Flush waiters.
func (a *Agent) changedLocked() {
	close(a.changed)
	a.changed = make(chan struct{})
}

// notify wakes Flush waiters and the worker.
func (a *Agent) notify() {
	a.mu.Lock()
	a.changedLocked()
	a.mu.Unlock()
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// unfinished returns the steps seen complete that are neither committed
// nor abandoned, sorted.
func (a *Agent) unfinished() []int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []int64
	for n, e := range a.steps {
		switch e.status.State {
		case control.StatePending, control.StateUploading, control.StateFailed:
			out = append(out, n)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}
