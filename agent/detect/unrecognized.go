package detect

import (
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"
)

// Nothing silent: with --layout auto, a watch dir that holds files no
// layout recognises would otherwise look exactly like an idle one. After a
// settle window of that, the watcher warns once with what it sees and the
// flags that would fit, and Unrecognized says so for status and flush.

// Unrecognized returns, while --layout auto has recognised nothing in a
// watch dir that has held entries for a settle window, what it saw and
// what to set; "" otherwise. Safe to call while Run runs.
func (w *Watcher) Unrecognized() string {
	if p := w.unrecognized.Load(); p != nil {
		return *p
	}
	return ""
}

// Recognizing reports whether --layout auto holds entries it has not
// placed for less than a settle window: the layout may still show itself
// as more files arrive, or Unrecognized will say it did not. Safe to call
// while Run runs.
func (w *Watcher) Recognizing() bool { return w.recognizing.Load() }

// checkRecognized updates Unrecognized and Recognizing after an evaluation
// at now.
func (w *Watcher) checkRecognized(now time.Time) {
	a, ok := w.layout.(*autoLayout)
	seen := visibleEntries(w.tree)
	if !ok || a.chosen != nil || len(seen) == 0 {
		w.unrecognizedSince = time.Time{}
		w.unrecognized.Store(nil)
		w.recognizing.Store(false)
		return
	}
	if w.unrecognizedSince.IsZero() {
		w.unrecognizedSince = now
	}
	if now.Sub(w.unrecognizedSince) < w.opts.Settle {
		w.recognizing.Store(true)
		return
	}
	w.recognizing.Store(false)
	msg := fmt.Sprintf("no checkpoint layout recognised in %s (it holds %s): set --layout to one of %s, and --step-pattern where names carry the step (see docs/agent.md)",
		w.tree.root, describeEntries(seen), strings.Join(LayoutNames()[1:], ", "))
	// Once per episode: each save changes what the root holds, and a log
	// line per save says nothing new.
	if w.unrecognized.Load() == nil {
		w.log.Warn("no checkpoint layout recognised; nothing is uploaded until one is set, but the steps ferry commit declares", zap.String("dir", w.tree.root),
			zap.String("holds", describeEntries(seen)), zap.Strings("layouts", LayoutNames()[1:]))
	}
	w.unrecognized.Store(&msg)
}

// visibleEntries lists the root's entries that are not hidden.
func visibleEntries(t *Tree) []Entry {
	var out []Entry
	for _, e := range t.Children("") {
		if !strings.HasPrefix(e.Name(), ".") {
			out = append(out, e)
		}
	}
	return out
}

// describeEntries names up to five entries, folders with a slash.
func describeEntries(es []Entry) string {
	var names []string
	for i, e := range es {
		if i == 5 {
			names = append(names, fmt.Sprintf("and %d more", len(es)-5))
			break
		}
		n := e.Name()
		if e.IsDir() {
			n += "/"
		}
		names = append(names, n)
	}
	return strings.Join(names, ", ")
}
