package detect

import (
	"errors"
	"time"
)

// Scan looks at the directory once and returns its complete steps, in step
// order, without touching the watcher's memory (it is safe while Run runs).
// Having nothing to observe over time, it
// takes a step as settled when its newest file was modified at least
// Options.Settle ago by the local clock. Steps that cannot be read are left
// out and their errors joined into the returned error; the other steps are
// returned all the same.
func (w *Watcher) Scan() ([]Step, error) {
	e, err := newEngine(w.opts, w.openCheck)
	if err != nil {
		return nil, err
	}
	if err := e.rescan(nil); err != nil {
		return nil, err
	}
	cutoff := time.Now().Add(-e.opts.Settle).UnixNano()
	var cands []Candidate
	var steps []Step
	for _, c := range e.candidates() {
		if e.blocked(&c) != "" {
			continue
		}
		s := e.build(&c)
		if newestModTime(&s) > cutoff {
			continue
		}
		cands = append(cands, c)
		steps = append(steps, s)
	}
	var out []Step
	var errs []error
	for _, i := range counterOrder(steps) {
		s := steps[i]
		if err := e.readable(&cands[i], &s); err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, s)
	}
	return out, errors.Join(errs...)
}
