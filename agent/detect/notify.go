package detect

import (
	"time"

	"github.com/fsnotify/fsnotify"
	"go.uber.org/zap"
)

// startNotify starts the kernel's events for Run: fsnotify (and
// close-write detection when asked), or polling where fsnotify is off or
// unavailable. It returns the event channels (nil when polling), the
// rescan interval, and what stops it all.
func (w *Watcher) startNotify() (<-chan fsnotify.Event, <-chan error, time.Duration, func()) {
	interval := w.opts.Rescan
	if w.opts.Poll {
		return nil, nil, w.opts.PollInterval, func() {}
	}
	fsw, err := fsnotify.NewWatcher()
	if err != nil {
		w.log.Warn("fsnotify unavailable; polling instead", zap.Error(err), zap.Duration("interval", w.opts.PollInterval))
		return nil, nil, w.opts.PollInterval, func() {}
	}
	w.fsw = fsw
	if fs := remoteFS(w.tree.root); fs != "" {
		w.remote = true
		w.log.Info("fsnotify sees only this host's writes on this filesystem; other hosts' writes are found at rescans (or use polling)",
			zap.String("dir", w.tree.root), zap.String("filesystem", fs), zap.Duration("rescan", interval))
	}
	stopClose := func() {}
	if w.opts.CloseWrite {
		stopClose = w.startCloseWatch()
	}
	return fsw.Events, fsw.Errors, interval, func() {
		stopClose()
		fsw.Close()
		w.fsw = nil
	}
}
