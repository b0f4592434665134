package detect

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
	"go.uber.org/zap"
)

// Watcher watches one checkpoint directory and reports its steps. Run does
// the watching; Scan is a one-shot look. A Watcher remembers which steps it
// reported for as long as it lives, across successive calls to Run.
type Watcher struct {
	*engine
	states map[string]*stepState
	// decls are the file sets markers declared, by candidate ID
	// (declare.go).
	decls map[string]*declaration
	// pointed is when the layout's pointer file was last seen naming each
	// step; watchedOnce is set after Run's first evaluation.
	pointed     map[int64]time.Time
	watchedOnce bool
	// linked is, per Composer latest-rank link, when it was last seen
	// naming each batch (declare.go).
	linked map[string]map[int64]time.Time
	looks  map[string][]linkSeen
	// trainer holds the steps the trainer declared complete.
	trainer *byTrainer
	// numbers are the step numbers the last evaluation found.
	numbers atomic.Pointer[map[int64]bool]
	// onDisk is the newest step number the layout found at the last
	// evaluation, declarations left out (-1: none; 0 before the first).
	onDisk        atomic.Int64
	layoutNumbers atomic.Pointer[map[int64]bool]
	// ready closes once Run's first look at the directory is done.
	ready     chan struct{}
	readyOnce sync.Once
	// evals counts evaluations, so tests can see that an idle watcher
	// does nothing.
	evals atomic.Int64
	// sent counts the events Run has sent; syncs carries Sync's requests
	// to Run, each answered with sent after a fresh look at the disk.
	sent  atomic.Int64
	syncs chan chan int64
	// chosen is the layout's effective name after the last evaluation,
	// readable while Run runs.
	chosen atomic.Pointer[string]
	// pending is what the last evaluation found not complete yet.
	pending atomic.Pointer[[]Pending]

	fsw        *fsnotify.Watcher
	watchErred bool
	// closes holds files known closed by their writers, while Run runs
	// with Options.CloseWrite; nil otherwise.
	closes  *closeTracker
	closeW  *closeWatch
	closeCh chan struct{}
	// unrecognized is what Unrecognized returns; unrecognizedSince is
	// when auto first saw entries it could not place.
	unrecognized      atomic.Pointer[string]
	unrecognizedSince time.Time
	recognizing       atomic.Bool
	// remote is set while Run watches a network filesystem, where the
	// kernel's leases see only this host's writers.
	remote  bool
	running atomic.Bool
	// beat is when Run's loop last turned (unix nanoseconds): LastLoop.
	beat atomic.Int64
	// watching is set while Run watches, once its first look succeeded.
	watching atomic.Bool
}

// ErrDirUnavailable is wrapped by Run's error when the watched directory
// itself cannot be listed: removed, moved away, made unreadable, or its
// file system gone. It may come back: the watcher remembers what it
// reported, and a later Run rescans and goes on from there.
var ErrDirUnavailable = errors.New("watched directory unavailable")

// dirError is an error about the watched directory itself.
type dirError struct{ err error }

func (e dirError) Error() string   { return e.err.Error() }
func (e dirError) Unwrap() []error { return []error{e.err, ErrDirUnavailable} }

// loopBeat is how often Run's loop turns when nothing happens, to show
// that it is not stuck (LastLoop).
const loopBeat = time.Second

// LastLoop returns when Run's loop last turned, or the zero time if it
// never ran. A running watcher turns at least every second; one that has
// not turned for long is stuck (in a listing that does not return, or
// sending to a reader that does not read). Safe to call at any time.
func (w *Watcher) LastLoop() time.Time {
	if n := w.beat.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

// Watching says whether Run is running and its first look at the
// directory succeeded. Safe to call at any time.
func (w *Watcher) Watching() bool { return w.watching.Load() }

// Linked reports whether Composer's latest-rank links were seen in the
// watch dir (or Options.Linked said so): a caller that keeps it and
// passes it back as Options.Linked after a restart keeps a save that
// removed every link, and was killed before it linked the new
// checkpoint, from being committed. Safe to call at any time.
func (w *Watcher) Linked() bool { return w.linksSeen.Load() }

// New checks the options and returns a Watcher. The directory need not
// exist yet; Run and Scan fail if it does not.
func New(opts Options) (*Watcher, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if o.Dir, err = filepath.Abs(o.Dir); err != nil {
		return nil, fmt.Errorf("detect: %w", err)
	}
	e, err := newEngine(o, nil)
	if err != nil {
		return nil, err
	}
	return &Watcher{
		engine:  e,
		states:  map[string]*stepState{},
		decls:   map[string]*declaration{},
		ready:   make(chan struct{}),
		syncs:   make(chan chan int64),
		trainer: newByTrainer(),
	}, nil
}

// Ready returns a channel closed once Run has looked at the whole
// directory for the first time (and before it sends what it found): files
// written after that are seen being written.
func (w *Watcher) Ready() <-chan struct{} { return w.ready }

// LayoutName returns the layout in use: the one auto chose once it has,
// else the configured name.
// Safe to call while Run runs.
func (w *Watcher) LayoutName() string {
	if n := w.chosen.Load(); n != nil {
		return *n
	}
	return w.opts.Layout
}

// Pending returns the steps the last evaluation found on disk but not
// complete yet, in step order. Safe to call while Run runs.
func (w *Watcher) Pending() []Pending {
	if p := w.pending.Load(); p != nil {
		return append([]Pending(nil), (*p)...)
	}
	return nil
}

// Sync has the running watcher list the directory again and evaluate what
// is on disk now, and returns once that evaluation's events are sent, with
// the number of events Run has sent in all: a reader that has handled that
// many has seen every step as it was on disk when Sync was called (complete,
// or pending in Pending). It waits for Run, or for ctx to end.
func (w *Watcher) Sync(ctx context.Context) (int64, error) {
	reply := make(chan int64, 1)
	select {
	case w.syncs <- reply:
	case <-ctx.Done():
		return 0, fmt.Errorf("detect: sync with the watcher: %w", ctx.Err())
	}
	select {
	case n := <-reply:
		return n, nil
	case <-ctx.Done():
		return 0, fmt.Errorf("detect: sync with the watcher: %w", ctx.Err())
	}
}

// Run watches the directory and sends events to out until ctx is
// cancelled, then returns nil. It returns an error if the directory cannot
// be listed, at start or at a rescan (for example because it was removed),
// wrapping ErrDirUnavailable.
// Sends block: a slow reader delays watching, and events lost meanwhile by
// fsnotify are recovered by the rescan that follows an overflow. Run owns
// no goroutine but its caller's; only one Run may be active at a time.
func (w *Watcher) Run(ctx context.Context, out chan<- Event) error {
	if !w.running.CompareAndSwap(false, true) {
		return errors.New("detect: Run is already running")
	}
	defer w.running.Store(false)
	events, errs, interval, stop := w.startNotify()
	defer stop()
	l := &loop{w: w, ctx: ctx, out: out, dirty: map[string]struct{}{}, created: map[string]bool{}}
	l.debounce = stoppedTimer()
	l.settle = stoppedTimer()
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	alive := time.NewTicker(loopBeat)
	defer alive.Stop()
	w.beat.Store(time.Now().UnixNano())
	if err := l.rescanAndEvaluate(); err != nil {
		return l.result(err)
	}
	w.watching.Store(true)
	defer w.watching.Store(false)
	for {
		w.beat.Store(time.Now().UnixNano())
		var err error
		select {
		case <-ctx.Done():
			return nil
		case <-alive.C:
		case ev, ok := <-events:
			if !ok {
				return errors.New("detect: fsnotify closed its event channel")
			}
			l.event(ev)
		case e, ok := <-errs:
			if !ok {
				return errors.New("detect: fsnotify closed its error channel")
			}
			err = l.fsnotifyError(e)
		case <-l.debounce.C:
			err = l.applyEvents()
		case <-l.settle.C:
			err = l.evaluate(nil)
		case <-ticker.C:
			err = l.rescanAndEvaluate()
		case reply := <-w.syncs:
			if err = l.rescanAndEvaluate(); err == nil {
				reply <- w.sent.Load()
			}
		case <-w.trainer.wake:
			l.armWithin(closeDebounce) // the trainer declared a step
		case <-w.closeCh:
			l.armWithin(closeDebounce) // a writer closed a file: evaluate soon
		}
		if err != nil {
			return l.result(err)
		}
	}
}

func stoppedTimer() *time.Timer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}

// loop is the state of one Run.
type loop struct {
	w     *Watcher
	ctx   context.Context
	out   chan<- Event
	dirty map[string]struct{}
	// created holds the paths of the window's Create events (Tree.refresh).
	created  map[string]bool
	debounce *time.Timer
	armed    bool
	due      time.Time // when the armed debounce fires
	settle   *time.Timer
}

// result maps the end of Run: cancellation is not an error.
func (l *loop) result(err error) error {
	if l.ctx.Err() != nil && errors.Is(err, l.ctx.Err()) {
		return nil
	}
	return err
}

// event notes the path an fsnotify event names; the debounce window
// collects a burst into one evaluation.
func (l *loop) event(ev fsnotify.Event) {
	rel, err := filepath.Rel(l.w.tree.root, ev.Name)
	if err != nil {
		return
	}
	rel = filepath.ToSlash(rel)
	if rel == "." {
		rel = ""
	} else if !insideRel(rel) {
		return
	}
	l.dirty[rel] = struct{}{}
	if !strings.Contains(rel, "/") {
		l.w.notePointer() // cheap: one small read, root events only
		l.w.noteLink(rel)
		l.w.noteNeMoMarker(rel, ev)
	}
	if ev.Has(fsnotify.Create) {
		l.created[rel] = true
	}
	l.arm()
}

// closeDebounce is how soon the loop evaluates after a writer closed a
// file: the other ranks' closes of a step come within it, and the full
// debounce window would add its length to every step's time to durable.
const closeDebounce = 20 * time.Millisecond

// arm starts the debounce window unless it runs already.
func (l *loop) arm() { l.armWithin(l.w.opts.Debounce) }

// armWithin makes the loop apply its events within d: it starts the
// debounce window, or shortens the one running to end within d.
func (l *loop) armWithin(d time.Duration) {
	due := time.Now().Add(d)
	if l.armed && !due.Before(l.due) {
		return
	}
	l.armed, l.due = true, due
	l.debounce.Reset(d)
}

func (l *loop) applyEvents() error {
	l.armed = false
	dirty, created := l.dirty, l.created
	l.dirty, l.created = map[string]struct{}{}, map[string]bool{}
	for p := range dirty {
		l.w.tree.refresh(p, l.w.watchDir, created[p])
	}
	return l.evaluate(dirty)
}

func (l *loop) fsnotifyError(err error) error {
	if errors.Is(err, fsnotify.ErrEventOverflow) {
		l.w.log.Warn("fsnotify queue overflowed; rescanning", zap.String("dir", l.w.tree.root))
		return l.rescanAndEvaluate()
	}
	l.w.log.Warn("fsnotify error", zap.Error(err))
	return nil
}

func (l *loop) rescanAndEvaluate() error {
	if err := l.w.rescan(l.w.watchDir); err != nil {
		return dirError{fmt.Errorf("detect: %w", err)}
	}
	return l.evaluate(nil)
}

// evaluate runs one evaluation, sends its events and arms the settle timer
// for the next pending step, if any. Steps whose settle window has ended are
// re-read from disk first, whatever woke the loop.
func (l *loop) evaluate(touched map[string]struct{}) error {
	if err := l.rootReadable(); err != nil {
		return err
	}
	now := time.Now()
	l.w.refreshDue(now)
	if _, ok := l.w.tree.Get(""); !ok {
		// Not reported as every step being deleted: the trainer's
		// folder vanishing is an operator's problem to look at.
		return dirError{fmt.Errorf("detect: watched directory %s disappeared", l.w.tree.root)}
	}
	events, next := l.w.evaluate(now, touched)
	l.w.readyOnce.Do(func() { close(l.w.ready) })
	for _, ev := range events {
		select {
		case l.out <- ev:
			l.w.sent.Add(1)
		case <-l.ctx.Done():
			return l.ctx.Err()
		}
	}
	if next.IsZero() {
		l.settle.Stop()
	} else {
		l.settle.Reset(next.Sub(now))
	}
	return nil
}

// rootReadable opens the watched directory itself before an evaluation:
// one made unreadable (a chmod, a remount) is Run's error, to be watched
// again once it is back, rather than its steps' files failing one by one
// and read as deleted.
func (l *loop) rootReadable() error {
	f, err := l.w.tree.openDir("")
	if err == nil {
		return f.Close()
	}
	if errors.Is(err, fs.ErrNotExist) {
		return dirError{fmt.Errorf("detect: watched directory %s disappeared", l.w.tree.root)}
	}
	return dirError{fmt.Errorf("detect: %w", err)}
}

// watchDir adds an fsnotify watch for a folder; without fsnotify it does
// nothing. A failure (usually the inotify watch limit) is logged once: the
// periodic rescan still finds what is written there, only later. Every
// rescan adds the watches again (adding an existing one is harmless), which
// also repairs a watch fsnotify dropped when a folder was renamed.
//
// inotify resolves a path as the agent's user would, links included: a
// folder swapped for a link to /etc would have the agent, often root,
// watch /etc and log what is created there under the watched names. So the
// folder is opened beneath the root first, the close-write watch is added
// through that descriptor, and the fsnotify watch (which takes only a
// path) is removed again if the path no longer names that folder.
func (w *Watcher) watchDir(rel string) {
	if w.fsw == nil {
		return
	}
	dir, err := w.tree.openDir(rel)
	if err != nil {
		return // gone, or no longer a folder: the rescan sees what it is
	}
	defer dir.Close()
	abs := w.tree.abs(rel)
	if w.closeW != nil {
		_ = w.closeW.add(dir, abs) // a folder it misses falls back to settling
	}
	if err := w.fsw.Add(abs); err != nil && !errors.Is(err, fs.ErrNotExist) {
		if !w.watchErred {
			w.watchErred = true
			w.log.Warn("cannot watch folder; it is seen at rescans only (raise fs.inotify.max_user_watches or use polling)",
				zap.String("dir", abs), zap.Error(err))
		}
		return
	}
	if !w.tree.sameDir(rel, dir) {
		_ = w.fsw.Remove(abs)
	}
}

// startCloseWatch starts the close-write reader for one Run and returns
// the function that stops it. Without it, steps settle as before.
func (w *Watcher) startCloseWatch() (stop func()) {
	t := newCloseTracker(w.tree.root)
	cw, err := startCloseWatch(t)
	if err != nil {
		w.log.Info("close-write detection unavailable; steps wait out the settle window", zap.Error(err))
		return func() {}
	}
	w.closes, w.closeW, w.closeCh = t, cw, make(chan struct{}, 1)
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := cw.run(w.closeCh); err != nil {
			w.log.Warn("close-write detection stopped; steps wait out the settle window", zap.Error(err))
			t.reset()
		}
	})
	return func() {
		_ = cw.close()
		wg.Wait()
		w.closes, w.closeW, w.closeCh = nil, nil, nil
	}
}
