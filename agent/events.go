package agent

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/ferrylabs/ferry/agent/control"
	"github.com/ferrylabs/ferry/agent/detect"
	"go.uber.org/zap"
)

// handle applies one watcher event: the watcher reports what it sees on
// disk and the agent decides, against its journal and the bucket, what it
// means. It never blocks on uploads or I/O. This file holds the whole of
// that policy: a step already done, a step's number, and what each kind of
// event does to the queue and to the pipeline.
func (a *Agent) handle(ev detect.Event) {
	a.mu.Lock()
	if ev.Kind == detect.Complete && !ev.Step.Counted && a.byTrainer[ev.Step.Number] != nil {
		if err := a.declaredDoneLocked(&ev.Step); err != errNotDone {
			a.resolveLocked(ev.Step.Number, err)
			a.mu.Unlock()
			return
		}
	}
	if ev.Kind == detect.Complete {
		if done, why, warn := a.alreadyDoneLocked(&ev.Step); done {
			a.mu.Unlock()
			log := a.log.Info
			if warn {
				log = a.log.Warn
			}
			log(why, stepField(&ev.Step), zap.String("to", a.opts.URL))
			return
		}
	}
	defer a.mu.Unlock()
	if ev.Kind == detect.Writing {
		a.writingLocked(ev.Step)
		return
	}
	n, ok := a.numberLocked(&ev)
	if !ok {
		return
	}
	defer a.changedLocked()
	e := a.steps[n]
	if ev.Kind == detect.Lost {
		a.lostLocked(e, ev.Step, n)
		return
	}
	if ev.Kind == detect.Deleted && e == nil && a.pipe != nil {
		a.pipe.vanished(n) // written in part, then removed
		return
	}
	switch ev.Kind {
	case detect.Complete:
		a.completeLocked(e, ev.Step, n)
	case detect.Deleted:
		a.deletedLocked(e, ev.Err, n)
	case detect.Error:
		a.unreadableLocked(e, ev, n)
	}
	a.forgetFinishedLocked()
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// writingLocked hands a step the trainer is still writing to the pipeline,
// unless it is counted (no number yet) or the agent already knows it:
// complete, committed here or in the bucket.
func (a *Agent) writingLocked(s detect.Step) {
	if a.pipe == nil || s.Counted || a.steps[s.Number] != nil {
		return
	}
	if _, ok := a.journal.get(s.Number); ok {
		return // committed before: a revision is sent whole once complete
	}
	if done, _, _ := a.alreadyDoneLocked(&s); done {
		return
	}
	a.pipe.writing(s)
}

// alreadyDoneLocked reports whether a step the watcher found complete needs
// no upload: committed by this agent before (journal) or found in the
// bucket at start-up; the watcher reports every complete step when it
// starts. A counted step is recognised by its content, since its number is
// new at every start. why is the log line saying so, warn whether it is a
// warning.
func (a *Agent) alreadyDoneLocked(s *detect.Step) (done bool, why string, warn bool) {
	if s.Counted {
		if n, ok := a.journal.findContent(s.Root, localFiles(*s)); ok {
			return true, fmt.Sprintf("not uploading %s: these files were committed before as step %d", s.ID, n), false
		}
		return false, "", false
	}
	if e, ok := a.journal.get(s.Number); ok {
		if e.Root == s.Root && sameLocalFiles(e.Files, localFiles(*s)) {
			return true, "not uploading: step already committed by this agent", false
		}
		if a.opts.Nodes > 1 {
			return true, "not uploading: step already committed, but its files on disk changed since; a multi-node step is not revised, so the bucket keeps the committed version (push it under another step number to keep this one)", true
		}
		if why, warn := revisionLoses(e.Files, localFiles(*s), s.Marker); why != "" {
			return true, why, warn
		}
		return false, "", false // changed since committed: revised (completeLocked)
	}
	if a.remote[s.Number] {
		return true, "not uploading: step already committed in the bucket", false
	}
	return false, "", false
}

// numberLocked gives a watcher event the agent's step number: the one read
// from names, or for a counted step the next counter value when it is
// reported complete and the one it was given when it is withdrawn. ok is
// false for an event that concerns no step of the agent (a counted step it
// never took on).
func (a *Agent) numberLocked(ev *detect.Event) (n int64, ok bool) {
	s := &ev.Step
	if !s.Counted {
		return s.Number, true
	}
	switch ev.Kind {
	case detect.Complete:
		if prev, ok := a.counted[s.ID]; ok {
			if _, committed := a.journal.get(prev); committed {
				// Changed after its commit: the same step, revised.
				s.Number = prev
				return prev, true
			}
		}
		n = a.counter
		a.counter++
		a.counted[s.ID] = n
	case detect.Deleted:
		if n, ok = a.counted[s.ID]; !ok {
			return 0, false
		}
	default:
		if n, ok = a.counted[s.ID]; !ok {
			n = a.counter // shown in status until the step is readable
		}
	}
	s.Number = n
	return n, true
}

// stepField names a step in a log line: its number, or a counted step's ID.
func stepField(s *detect.Step) zap.Field {
	if s.Counted {
		return zap.String("step", s.ID)
	}
	return zap.Int64("step", s.Number)
}

// completeLocked queues a step found complete on disk.
func (a *Agent) completeLocked(e *entry, s detect.Step, n int64) {
	if sameStepQueued(e, s) {
		// Reported again with the same files (a trainer declaring the
		// step again, a rescan): the upload queued or running is already
		// this content. Restarting it would send every byte again.
		a.log.Debug("step reported complete again, unchanged; its upload goes on", zap.Int64("step", n))
		return
	}
	if a.pipe != nil {
		a.pipe.completed(n)
	}
	if e != nil && e.status.State == control.StateUploading {
		// Re-reported after a change while uploading: the running
		// upload is cancelled by the Deleted event that preceded this
		// one; queue the new content behind it.
		e.deleted = true
		if e.cancel != nil {
			e.cancel()
		}
	}
	_, revise := a.journal.get(n)
	ne := &entry{
		step:     s,
		complete: time.Now(),
		revise:   revise,
		status: control.StepStatus{Step: n, State: control.StatePending, Files: len(s.Files) + len(s.Generated),
			Bytes: s.TotalBytes(), Detected: time.Now().UTC()},
	}
	ne.status.LastWrite = ne.lastWrite().UTC()
	if !revise {
		ne.early = a.traffic.takeEarly(n)
		ne.status.BytesSent = ne.early
	}
	a.steps[n] = ne
	if revise {
		a.log.Warn("checkpoint changed on disk after it was committed; uploading it as the step's next revision",
			zap.Int64("step", n), zap.Int("files", len(s.Files)), zap.Int64("bytes", s.TotalBytes()))
		return
	}
	a.log.Info("checkpoint complete on disk", zap.Int64("step", n), zap.Int("files", len(s.Files)), zap.Int64("bytes", s.TotalBytes()))
}

// sameStepQueued reports whether e is waiting for or running an upload of
// exactly s's files (paths, sizes, times, inodes) and links.
func sameStepQueued(e *entry, s detect.Step) bool {
	if e == nil || e.deleted || e.revise {
		return false
	}
	switch e.status.State {
	case control.StatePending, control.StateUploading:
	default:
		return false
	}
	return e.step.Root == s.Root && sameLocalFiles(localFiles(e.step), localFiles(s)) &&
		slices.Equal(e.step.Symlinks, s.Symlinks) && slices.EqualFunc(e.step.Generated, s.Generated, func(a, b detect.Generated) bool {
		return a.RelPath == b.RelPath && string(a.Data) == string(b.Data)
	})
}

// deletedLocked abandons a step removed or changed before it was durable.
func (a *Agent) deletedLocked(e *entry, why error, n int64) {
	if e == nil || e.status.State == control.StateAbandoned {
		return
	}
	if e.status.State == control.StateCommitted || e.status.State == control.StateNodeDone {
		if !detect.Superseded(&e.step) {
			what := "deleted on disk"
			if errors.Is(why, detect.ErrChanged) {
				what = "changed on disk (files deleted, or a new save of it begun)"
			}
			a.log.Info("committed step "+what+"; the bucket keeps the committed version (a complete new save of the step is published as its next revision)",
				zap.Int64("step", n))
		}
		return
	}
	reason := "deleted by the trainer"
	if errors.Is(why, detect.ErrChanged) {
		reason = "changed on disk after it looked complete"
	}
	a.log.Warn("step not durable yet; abandoning its upload", zap.Int64("step", n), zap.String("reason", reason))
	e.deleted = true
	e.status.Error = reason
	if e.cancel != nil {
		e.cancel() // the worker abandons the upload when Push returns
	} else {
		// An earlier, interrupted attempt may have left uploads
		// behind: the worker cleans them up.
		e.status.State = control.StateAbandoned
		e.cleanup = true
	}
}

// unreadableLocked records a step that is complete but cannot be read; it
// is retried when the watcher reports it Complete.
func (a *Agent) unreadableLocked(e *entry, ev detect.Event, n int64) {
	msg := fmt.Sprintf("step %d cannot be read: %v", n, ev.Err)
	a.lastErr = msg
	a.opts.Metrics.Error("detect")
	a.log.Error("checkpoint cannot be read", zap.Int64("step", n), zap.Error(ev.Err))
	if e == nil {
		e = &entry{step: ev.Step, status: control.StepStatus{Step: n, Detected: time.Now().UTC()}}
		a.steps[n] = e
	}
	if e.status.State != control.StateUploading {
		e.status.State = control.StateFailed
		e.status.Error = msg
		e.nextTry = time.Now().Add(a.opts.RetryMax)
	}
}

// lostLocked records a step that was complete on disk but vanished before
// the watcher reported it (its settle window or its files' closes were
// still pending): nothing of it is durable, which the operator must hear.
func (a *Agent) lostLocked(e *entry, s detect.Step, n int64) {
	if a.pipe != nil {
		a.pipe.vanished(n) // parts sent early are aborted
	}
	if e != nil && e.status.State != control.StateFailed {
		return // reported before: the watcher's Deleted rules apply
	}
	a.opts.Metrics.Lost()
	if s.Counted {
		a.log.Warn("complete checkpoint deleted before it could be uploaded; it is not durable", zap.String("step", s.ID),
			zap.Int("files", len(s.Files)), zap.Int64("bytes", s.TotalBytes()))
		return // a counted step has no number to show it under
	}
	a.log.Warn("complete checkpoint deleted before it could be uploaded; it is not durable (a cleanup that deletes steps within seconds of their save outruns the upload: keep more steps, or delete later)",
		stepField(&s), zap.Int64("step_number", n), zap.Int("files", len(s.Files)), zap.Int64("bytes", s.TotalBytes()))
	a.steps[n] = &entry{step: s, status: control.StepStatus{Step: n, State: control.StateLost, Files: len(s.Files),
		Bytes: s.TotalBytes(), Detected: time.Now().UTC(), Error: "deleted from disk before it could be uploaded"}}
}

// revisionLoses says why a step found complete again after its commit is
// not a new version to publish: a revision replaces the committed one, so
// it must never lose data. Files gone from disk with the rest unchanged
// are a cleanup (a script deleting optimizer states to save space), not a
// save: the bucket keeps the committed version. Files gone while others
// changed are a re-save only where a marker, written after the new files
// (detect requires that), says the new set is complete; without a marker
// nothing does, and the committed version stays. "" when the new version
// may be published; warn when the operator should look.
func revisionLoses(committed, now []localFile, marker string) (why string, warn bool) {
	have := make(map[string]localFile, len(now))
	for _, f := range now {
		have[f.Path] = f
	}
	var missing []string
	for _, f := range committed {
		if _, ok := have[f.Path]; !ok {
			missing = append(missing, f.Path)
		}
	}
	if len(missing) == 0 {
		return "", false
	}
	kept := map[localFile]bool{}
	for _, f := range committed {
		kept[f] = true
	}
	changed := false
	for _, f := range now {
		if !kept[f] {
			changed = true
		}
	}
	switch {
	case !changed:
		return fmt.Sprintf("not revising: %d of the committed step's files were deleted on disk (first %s) and the rest are unchanged; the bucket keeps the committed version", len(missing), missing[0]), false
	case marker == "":
		return fmt.Sprintf("not revising: since the commit %d files were deleted on disk (first %s) and others changed, and this layout has no marker to say the new set is complete; the bucket keeps the committed version", len(missing), missing[0]), true
	}
	return "", false
}

// errNotDone: a declared step is not committed yet; upload it.
var errNotDone = errors.New("not done")

// declaredDoneLocked decides a step the trainer declared complete against
// what is committed: nil when this content is committed already,
// ErrCommittedOther when other content is, errNotDone to upload it.
func (a *Agent) declaredDoneLocked(s *detect.Step) error {
	if e, ok := a.journal.get(s.Number); ok {
		if e.Root == s.Root && sameLocalFiles(e.Files, localFiles(*s)) {
			return nil
		}
		return fmt.Errorf("step %d: %w (%d files committed, %d on disk now): save it under another step number", s.Number, ErrCommittedOther, len(e.Files), len(s.Files))
	}
	if a.remote[s.Number] {
		return fmt.Errorf("step %d: %w in the bucket before this agent started: save it under another step number", s.Number, ErrCommittedOther)
	}
	return errNotDone
}
