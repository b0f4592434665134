package doctor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ferrylabs/ferry/agent/detect"
	"github.com/ferrylabs/ferry/internal/safepath"
	"github.com/ferrylabs/ferry/internal/units"
)

// Local runs the checks of this host: the watch dir and what the agent
// would see in it, its filesystem, inotify, leases, the state dir and free
// space.
func Local(ctx context.Context, cfg Config) []Result {
	dir := cfg.Detect.Dir
	fi, err := os.Stat(dir)
	var rs []Result
	switch {
	case errors.Is(err, fs.ErrNotExist):
		rs = append(rs, fail("watch dir", "create it, or point --watch (FERRY_WATCH) at the directory the trainer saves checkpoints into", "%s does not exist", dir))
	case err != nil:
		rs = append(rs, fail("watch dir", "run the agent as a user who can read it", "%s: %v", dir, err))
	case !fi.IsDir():
		rs = append(rs, fail("watch dir", "point --watch (FERRY_WATCH) at the checkpoint directory, not a file", "%s is not a directory", dir))
	}
	if len(rs) > 0 {
		rs = append(rs, skipAll("no watch dir", "layout", "filesystem", "inotify", "leases", "free space")...)
		return append(rs, stateDirCheck(cfg.StateDir))
	}
	if _, err := os.ReadDir(dir); err != nil {
		rs = append(rs, fail("watch dir", "run the agent as the trainer's user, or give it read access", "%s: %v", dir, err))
	} else {
		rs = append(rs, ok("watch dir", "%s", dir))
	}
	rs = append(rs, layoutCheck(ctx, cfg.Detect))
	rs = append(rs, filesystemCheck(dir, cfg.Detect.Poll), inotifyCheck(dir, cfg.Detect.Poll))
	rs = append(rs, leaseCheck(dir, cfg.Detect.CloseWrite))
	rs = append(rs, freeSpaceCheck(dir), stateDirCheck(cfg.StateDir))
	if cfg.ControlGroup != "" {
		rs = append(rs, controlGroupCheck(cfg))
	}
	return rs
}

// controlGroupCheck checks that the agent can open its control socket to
// --control-group as it starts.
func controlGroupCheck(cfg Config) Result {
	const check = "control group"
	if _, err := os.Stat(cfg.StateDir); errors.Is(err, fs.ErrNotExist) {
		return warn(check, "create the state dir with mode 0711 (the systemd unit: StateDirectoryMode=0711)",
			"%s does not exist yet: the agent creates it owner-only, which keeps group %s out", cfg.StateDir, cfg.ControlGroup)
	}
	if err := cfg.ControlCheck(); err != nil {
		return fail(check, "", "%v", err)
	}
	return ok(check, "members of %s may use the control socket (ferry commit, flush, status)", cfg.ControlGroup)
}

// layoutCheck runs the agent's detection on the watch dir for a moment:
// the layout it recognises, the steps complete now (Watcher.Scan), and
// for each step not complete yet, what it waits for.
func layoutCheck(ctx context.Context, opts detect.Options) Result {
	const check = "layout"
	w, err := detect.New(opts)
	if err != nil {
		return fail(check, "fix the detection flags (--layout, --step-pattern...)", "%v", err)
	}
	complete, scanErr := w.Scan()
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	events := make(chan detect.Event)
	done := make(chan error, 1)
	go func() { done <- w.Run(rctx, events) }()
	for running := true; running; {
		select {
		case <-events: // what Scan found is enough
		case err = <-done:
			running = false
		}
	}
	if err != nil {
		return fail(check, "see the error", "watching %s: %v", opts.Dir, err)
	}
	var parts []string
	parts = append(parts, "layout "+w.LayoutName())
	settled := map[int64]bool{}
	switch n := len(complete); n {
	case 0:
		parts = append(parts, "no complete step yet")
	default:
		for _, s := range complete {
			settled[s.Number] = true
		}
		parts = append(parts, fmt.Sprintf("%d complete %s (newest %d, %s)", n, plural(n, "step", "steps"),
			complete[n-1].Number, units.FormatBytes(complete[n-1].TotalBytes())))
	}
	for _, p := range w.Pending() {
		// A step Scan found settled is only settling again for a watcher
		// that has just started.
		if !settled[p.Step] {
			parts = append(parts, fmt.Sprintf("step %d %s: %s", p.Step, p.State, p.Reason))
		}
	}
	if scanErr != nil {
		return warn(check, "make every file of the watch dir readable by the agent's user", "%s; unreadable: %v", strings.Join(parts, "; "), scanErr)
	}
	if w.LayoutName() == "auto" && len(complete) == 0 && len(w.Pending()) == 0 {
		entries, _ := os.ReadDir(opts.Dir)
		if len(entries) > 0 {
			return warn(check, "pass --layout (one of "+strings.Join(detect.LayoutNames(), ", ")+") or --step-pattern",
				"%d entries in %s, but no layout recognises a step among them", len(entries), opts.Dir)
		}
		parts = append(parts, "empty: the first step shows when the trainer saves")
	}
	return ok(check, "%s", strings.Join(parts, "; "))
}

// stateDirCheck checks that the agent can create and write its state dir,
// and that it has room.
func stateDirCheck(dir string) Result {
	const check = "state dir"
	existing := dir
	for {
		if _, err := os.Stat(existing); err == nil {
			break
		}
		parent := filepath.Dir(existing)
		if parent == existing {
			return fail(check, "set --state-dir (FERRY_STATE_DIR) to a writable local directory", "no part of %s exists", dir)
		}
		existing = parent
	}
	// As the agent will: its folders go in <dir>/agents, so dir is judged
	// as a parent (a root-owned sticky folder such as /tmp passes).
	if err := safepath.Check(filepath.Join(dir, "agents"), os.Geteuid()); err != nil {
		return unsafeStateDir(err)
	}
	f, err := os.CreateTemp(existing, ".ferry-doctor-*")
	if err != nil {
		return fail(check, "set --state-dir (FERRY_STATE_DIR) to a directory the agent's user can write", "%s cannot be written: %v", existing, err)
	}
	f.Close()
	os.Remove(f.Name())
	free, total, fsName := diskSpace(existing)
	where := dir
	if existing != dir {
		where = fmt.Sprintf("%s (created at the agent's start under %s)", dir, existing)
	}
	if remoteFilesystem(fsName) {
		return warn(check, "put the state dir on a local disk (the control socket and the journal's fsync)", "%s is on %s", where, fsName)
	}
	if total > 0 && free < 64<<20 {
		return fail(check, "free space on the state dir's filesystem", "%s: only %s free", where, units.FormatBytes(free))
	}
	return ok(check, "%s writable, %s free (%s)", where, units.FormatBytes(free), fsName)
}

// unsafeStateDir is the state dir check's verdict on a path the agent
// would refuse to keep its state in (safepath's StrictModes).
func unsafeStateDir(err error) Result {
	var p *safepath.Problem
	if errors.As(err, &p) {
		return fail("state dir", p.Fix, "%s: %s; the agent refuses to keep its state there", p.Path, p.Reason)
	}
	return fail("state dir", "set --state-dir (FERRY_STATE_DIR) to a folder of the agent's own", "%v", err)
}

func freeSpaceCheck(dir string) Result {
	free, total, _ := diskSpace(dir)
	if total <= 0 {
		return warn("free space", "", "unknown for %s", dir)
	}
	pct := float64(free) / float64(total) * 100
	if pct < 5 {
		return warn("free space", "free space on the checkpoint filesystem, or keep fewer steps on disk (--keep-local N)",
			"%s free of %s on the watch dir's filesystem (%.1f%%): the trainer's next save may fail", units.FormatBytes(free), units.FormatBytes(total), pct)
	}
	return ok("free space", "%s free of %s on the watch dir's filesystem", units.FormatBytes(free), units.FormatBytes(total))
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
