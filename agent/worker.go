package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/ferrylabs/ferry/agent/control"
	"github.com/ferrylabs/ferry/internal/prune"
	"github.com/ferrylabs/ferry/internal/remote"
	"github.com/ferrylabs/ferry/manifest"
	"github.com/ferrylabs/ferry/uploader"
)

// work uploads queued steps one at a time, in the order WhenBehind sets
// (newest first by default), until ctx ends or, once draining, the queue
// is empty.
func (a *Agent) work(ctx context.Context) {
	for ctx.Err() == nil {
		a.cleanupAbandoned(ctx)
		e, wait := a.next()
		if e != nil {
			a.upload(ctx, e)
			continue
		}
		if a.draining.Load() && !a.drainLeft() {
			return
		}
		var timer *time.Timer
		var due <-chan time.Time
		if wait >= 0 {
			timer = time.NewTimer(wait)
			due = timer.C
		}
		select {
		case <-ctx.Done():
		case <-a.wake:
		case <-due:
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

// next returns the step to upload now, as WhenBehind orders them, or nil
// and how long until one is due (-1: none is waiting).
func (a *Agent) next() (*entry, time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.opts.WhenBehind == SkipSuperseded {
		a.skipSupersededLocked()
	}
	var best *entry
	wait := time.Duration(-1)
	now := time.Now()
	for _, e := range a.steps {
		if e.status.State != control.StatePending && e.status.State != control.StateFailed {
			continue
		}
		if d := a.dueLocked(e).Sub(now); d > 0 {
			if wait < 0 || d < wait {
				wait = d
			}
			continue
		}
		if best == nil || a.before(e, best) {
			best = e
		}
	}
	return best, wait
}

// before reports whether e goes before f.
func (a *Agent) before(e, f *entry) bool {
	if a.opts.WhenBehind == OldestFirst {
		return e.status.Step < f.status.Step
	}
	return e.status.Step > f.status.Step
}

// dueLocked is when a waiting step may be tried next.
func (a *Agent) dueLocked(e *entry) time.Time {
	due := e.nextTry
	if a.draining.Load() && !failedForGoodAt(e, time.Now()) {
		// While draining, retry a failed step rather than sleeping out its
		// backoff, but not back to back: a step the server refuses at once
		// (403) would be sent again and again until the drain timeout.
		if soon := e.lastTry.Add(a.opts.RetryMin); soon.Before(due) {
			due = soon
		}
	}
	return due
}

// drainLeft reports whether a drain has a step left to upload: one
// waiting, uploading or failed and to be retried. A step failed for good
// (failForGoodLocked: its manifest refused, its bytes not what the
// framework recorded) is not tried again on the way out either.
func (a *Agent) drainLeft() bool {
	now := time.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, e := range a.steps {
		switch e.status.State {
		case control.StatePending, control.StateUploading:
			return true
		case control.StateFailed:
			if !failedForGoodAt(e, now) {
				return true
			}
		}
	}
	return false
}

// failedForGoodAt reports whether e failed for good (failForGoodLocked).
func failedForGoodAt(e *entry, now time.Time) bool {
	return e.status.State == control.StateFailed && e.nextTry.Sub(now) > failedForGood
}

// skipSupersededLocked marks skipped every waiting step older than the
// newest step complete on disk and not failing (waiting, uploading or
// durable): a newer step that cannot be read or committed supersedes none.
func (a *Agent) skipSupersededLocked() {
	newest := int64(-1)
	for n, e := range a.steps {
		switch e.status.State {
		case control.StatePending, control.StateUploading, control.StateCommitted, control.StateNodeDone:
			newest = max(newest, n)
		}
	}
	for n, e := range a.steps {
		if n < newest && (e.status.State == control.StatePending || e.status.State == control.StateFailed) && !e.deleted {
			e.status.State = control.StateSkipped
			e.status.Error = fmt.Sprintf("superseded by step %d before its upload started (--when-behind skip)", newest)
			e.cleanup = e.status.Attempts > 0 // an earlier attempt may have left uploads
			a.log.Warn("skipping a step: a newer one is complete", zap.Int64("step", n), zap.Int64("newer", newest))
		}
	}
}

// cleanupAbandoned discards the upload state of abandoned steps.
func (a *Agent) cleanupAbandoned(ctx context.Context) {
	a.mu.Lock()
	var todo []int64
	for n, e := range a.steps {
		if e.cleanup {
			e.cleanup = false
			todo = append(todo, n)
		}
	}
	a.mu.Unlock()
	for _, n := range todo {
		if err := a.destination().Abandon(ctx, n); err != nil {
			a.log.Warn("could not clean up an abandoned upload; prune removes what is left", zap.Int64("step", n), zap.Error(err))
		}
	}
}

// upload pushes one step and records the outcome.
func (a *Agent) upload(ctx context.Context, e *entry) {
	stepCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	a.mu.Lock()
	n := e.status.Step
	e.cancel = cancel
	e.lastTry = time.Now()
	e.status.State = control.StateUploading
	e.status.Attempts++
	e.status.Error = ""
	e.status.BytesSent = e.early
	step := e.step
	a.changedLocked()
	a.mu.Unlock()

	a.log.Info("uploading step", zap.Int64("step", n), zap.Int("files", len(step.Files)), zap.Int("attempt", e.status.Attempts))
	before := a.requestCounts()
	step.Number = n
	if a.pipe != nil {
		a.pipe.setBusy(true) // the link is this step's
		defer a.pipe.setBusy(false)
		a.pipe.quiesce(n) // the step's resume state has one writer at a time
	}
	res, err := a.destination().Push(stepCtx, step, uploader.PushOptions{Upload: a.opts.Upload, Progress: pushProgress{a: a, e: e},
		Layout: a.detectedLayout(), AllowEmpty: a.opts.AllowEmpty, Revise: e.revise})
	a.opts.Metrics.AddParts(res.Stats.PartsSent)
	if err == nil && res.Committed && a.opts.KeepRemote > 0 {
		// Only the writer of a manifest prunes, so N nodes do not all
		// list the bucket; it runs after the lock below is released.
		defer a.pruneRemote(ctx)
	}

	a.recordRequests(e, before)
	if a.settle(ctx, e, res, err) {
		// Disk and network work of a commit, outside the lock: status,
		// flush and the watcher never wait on a fsync or a slow server.
		a.recordCommitted(ctx, e, res)
	}
}

// recordRequests adds the requests made since before to the step's status.
func (a *Agent) recordRequests(e *entry, before map[string]int64) {
	spent := a.requestCounts()
	a.mu.Lock()
	defer a.mu.Unlock()
	for op, c := range spent {
		if d := c - before[op]; d > 0 {
			if e.status.Requests == nil {
				e.status.Requests = map[string]int64{}
			}
			e.status.Requests[op] += d
		}
	}
}

// settle records the outcome of an upload attempt in memory and reports
// whether the step is now durable (committed, or this node's share).
func (a *Agent) settle(ctx context.Context, e *entry, res uploader.PushResult, err error) bool {
	n := e.status.Step
	a.mu.Lock()
	defer a.mu.Unlock()
	defer a.changedLocked()
	e.cancel = nil
	e.status.PartsResent += res.Stats.PartsResent
	switch {
	case e.deleted && err != nil:
		// The trainer removed or rewrote the step mid-upload. Discard what
		// this attempt uploaded now, before a newer report of the same
		// step (rewritten content, which replaced e in the map) starts
		// from scratch.
		if a.steps[n] == e {
			e.status.State = control.StateAbandoned
		}
		a.mu.Unlock()
		a.discard(ctx, n)
		a.mu.Lock()
	case err != nil && ctx.Err() != nil:
		// Aborted (drain timeout or second signal): state stays on disk.
		e.status.State = control.StatePending
		e.status.Error = "interrupted; resumes at the next start"
	case errors.Is(err, remote.ErrConflict):
		a.failForGoodLocked(e, "commit", err, "step is committed in the bucket with different content; not overwriting it")
	case errors.Is(err, manifest.ErrNotAsRecorded):
		a.failForGoodLocked(e, "commit", err, "step's files disagree with what its framework recorded (a torn or missing file); not committing it: the trainer's next complete save is committed as usual")
	case errors.Is(err, remote.ErrRefusedManifest):
		// The same files make the same manifest: uploading them again
		// would be refused again, for ever.
		a.failForGoodLocked(e, "commit", err, "the step's manifest is invalid; not uploading the step again until it changes on disk")
	case errors.Is(err, uploader.ErrEmptyStep):
		a.failForGoodLocked(e, "upload", err, "step has no files; not committing it (--allow-empty commits empty steps)")
	case err != nil:
		backoff := a.backoff(e.status.Attempts)
		e.status.State = control.StateFailed
		e.status.Error = err.Error()
		e.nextTry = time.Now().Add(backoff)
		a.lastErr = err.Error()
		a.opts.Metrics.Error("upload")
		a.log.Warn("upload failed; will retry", zap.Int64("step", n), zap.Duration("in", backoff), zap.Error(err))
	default:
		e.status.State = control.StateCommitted
		if res.Pending {
			e.status.State = control.StateNodeDone
		}
		e.status.Committed = time.Now().UTC()
		e.status.Error = ""
		a.recording++ // until recordCommitted is done: Flush waits for it
		return true
	}
	return false
}

// failForGoodLocked marks a step failed with no retry: a human must look.
func (a *Agent) failForGoodLocked(e *entry, stage string, err error, msg string) {
	e.status.State = control.StateFailed
	e.status.Error = err.Error()
	e.nextTry = time.Now().Add(2 * failedForGood) // never
	a.lastErr = err.Error()
	a.opts.Metrics.Error(stage)
	a.log.Error(msg, zap.Int64("step", e.status.Step), zap.Error(err))
	a.resolveLocked(e.status.Step, err) // a trainer waiting hears it now
}

// pruneRemote applies --keep-remote to the bucket, holding out the steps
// declared ahead (retention_hold.go). A failure is logged and retried
// after the next commit.
func (a *Agent) pruneRemote(ctx context.Context) {
	p, err := prune.Prune(ctx, prune.Options{Store: a.opts.Store, Prefix: a.opts.Prefix,
		Policy: prune.Policy{KeepLast: a.opts.KeepRemote, KeepEvery: a.opts.KeepRemoteEvery}, Hold: a.heldOut(), Logger: a.log})
	if err != nil {
		if ctx.Err() == nil {
			a.opts.Metrics.Error("prune")
			a.log.Warn("keep-remote: prune failed; retried after the next commit", zap.Error(err))
		}
		return
	}
	if len(p.Pruned) > 0 || len(p.Objects) > 0 {
		// The pruned steps' objects go one grace period later
		// (prune.Plan.Later): say so, or 0 bytes freed reads as a bug.
		var later int64
		for _, d := range p.Later {
			later += d.Bytes
		}
		a.log.Info("keep-remote: pruned the bucket", zap.Int64s("steps", p.Pruned), zap.Int("objects", len(p.Objects)), zap.Int64("bytes", p.ObjectBytes),
			zap.Int64("bytes_deleted_after_grace", later), zap.Duration("grace", prune.DefaultMinAge))
	}
}

// requestCounts snapshots the S3 request counts, if they are counted.
func (a *Agent) requestCounts() map[string]int64 {
	if a.opts.Requests == nil {
		return nil
	}
	return a.opts.Requests()
}

// discard abandons an upload attempt whose step is being uploaded again
// from scratch: the new attempt must not reuse its parts.
func (a *Agent) discard(ctx context.Context, n int64) {
	if err := a.destination().Abandon(ctx, n); err != nil {
		a.log.Warn("could not clean up a superseded upload", zap.Int64("step", n), zap.Error(err))
	}
}

func (a *Agent) backoff(attempt int) time.Duration {
	d := a.opts.RetryMin
	for i := 1; i < attempt && d < a.opts.RetryMax; i++ {
		d *= 2
	}
	return min(d, a.opts.RetryMax)
}

// recordCommitted records a durable step in the journal, metrics and log,
// and applies local retention. It runs without a.mu held.
func (a *Agent) recordCommitted(ctx context.Context, e *entry, res uploader.PushResult) {
	n := e.status.Step // immutable once the entry exists
	now := time.Now()
	ahead := a.declaredAhead(e, n)
	ce := committedEntry{Step: n, Root: e.step.Root, Committed: now.UTC(), Pending: res.Pending, Files: localFiles(e.step), Ahead: ahead}
	if err := a.journal.add(ce); err != nil {
		// The step is durable; only the local record failed. After a
		// restart the bucket listing still marks it done.
		a.log.Error("could not record the committed step in the journal", zap.Int64("step", n), zap.Error(err))
	}
	if a.watcher.Linked() {
		if err := a.journal.noteLinked(); err != nil {
			a.log.Error("could not record in the journal that the checkpoints are linked", zap.Error(err))
		}
	}
	a.releasePassed(n, ahead)
	ttd := now.Sub(e.lastWrite())
	if !res.Pending {
		// A node-done step is durable when the whole step is: the metrics
		// learn it with the commit (follow.go), not with this node's part.
		a.opts.Metrics.Committed(n, ttd)
		if a.pipe != nil {
			a.pipe.supersededBy(n)
		}
	}
	a.mu.Lock()
	a.resolveLocked(n, nil) // node-done: this node's declared part is durable
	a.mu.Unlock()
	verb := "committed step"
	switch {
	case res.Pending:
		// This node's files and part are durable: its work on the step is
		// done; the last node to finish commits the step.
		verb = "node's share of the step is durable; the step commits when every node's is"
	case res.ByPeer:
		verb = "committed step (another node wrote the manifest)"
	case !res.Committed:
		verb = "step was already committed with identical content"
	case res.Manifest != nil && res.Manifest.Revision > 0:
		verb = "committed a revision of the step (restore and list take it)"
	}
	a.log.Info(verb, zap.Int64("step", n), zap.Int("files", len(e.step.Files)+len(e.step.Generated)), zap.Int64("bytes", e.step.TotalBytes()),
		zap.Int64("bytes_sent", res.Stats.BytesSent), zap.Duration("time_to_durable", ttd.Round(time.Millisecond)))
	if !res.Pending && (res.Committed || res.ByPeer) {
		rev := 0
		if res.Manifest != nil {
			rev = res.Manifest.Revision
		}
		a.hooks.enqueue(commitEvent{step: n, files: len(e.step.Files) + len(e.step.Generated), bytes: e.step.TotalBytes(), revision: rev})
	}
	a.mu.Lock()
	a.recording-- // the journal has it: what flush waits for is done
	if res.Pending {
		a.wakeFollower() // another node commits it: look for that
	}
	a.changedLocked()
	a.mu.Unlock()
	if a.opts.KeepLocal > 0 {
		// Not waited for by flush: its bucket checks may stall with the
		// server, and durability does not depend on it.
		a.keepLocal(ctx)
	}
}
