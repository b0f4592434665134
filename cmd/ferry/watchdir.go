package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"go.uber.org/zap"

	"github.com/ferrylabs/ferry/internal/sdnotify"
)

// watchDirPoll is how often the agent looks for a watch dir that does not
// exist yet: a stat a second costs nothing, and the start-up scan finds
// whatever the trainer wrote before the agent saw the folder.
const watchDirPoll = time.Second

// waitForWatchDir returns true once dir exists as a directory. A job
// script may start the agent before the trainer (or a restore) creates
// the checkpoint folder, and a service may start before its file system
// is mounted: the agent waits, says so once in the log (and to systemd,
// which it keeps told that it is alive), and starts watching when the
// folder appears. It returns false, with nil, when ctx ends first (the
// agent was stopped: nothing to drain), and false with an error when dir
// turns out to be something else than a folder or cannot be looked at.
func waitForWatchDir(ctx context.Context, dir string, every time.Duration, log *zap.Logger) (bool, error) {
	waited := false
	for {
		fi, err := os.Stat(dir)
		switch {
		case err == nil && fi.IsDir():
			if waited {
				log.Info("the watch dir exists now; watching it", zap.String("dir", dir))
				_ = sdnotify.Status("watching " + dir)
			}
			return true, nil
		case err == nil:
			return false, usagef("--watch %s: not a directory", dir)
		case !errors.Is(err, fs.ErrNotExist):
			return false, fmt.Errorf("--watch: %w", err)
		}
		if !waited {
			waited = true
			log.Info("waiting for the watch dir to be created; nothing is watched until then", zap.String("dir", dir),
				zap.Stringer("poll", every))
			// Started, and alive, though not watching yet: a service
			// manager must neither time the start out nor restart it.
			_ = sdnotify.Ready()
			_ = sdnotify.Status("waiting for " + dir + " to be created")
		}
		_ = sdnotify.Watchdog()
		t := time.NewTimer(every)
		select {
		case <-ctx.Done():
			t.Stop()
			log.Info("stopped before the watch dir was created", zap.String("dir", dir))
			return false, nil
		case <-t.C:
		}
	}
}
