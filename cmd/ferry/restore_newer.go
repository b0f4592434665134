package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"time"

	"go.uber.org/zap"

	"github.com/ferrylabs/ferry/agent/detect"
)

// Newer local steps. A node that restores step 200 may still hold a
// checkpoint-300 of its own that never became durable (torn, or saved
// after the last commit): trainers resume from the newest folder they find
// (Hugging Face's get_last_checkpoint, DCP loaders that pick the highest
// step), so they would take the torn one. restore names such folders, and
// with --set-aside-newer renames them out of the trainer's way (never
// deletes them).

// newerStep is a folder in the target whose name gives a step newer than
// the one restored.
type newerStep struct {
	Name string `json:"name"`
	Step int64  `json:"step"`
	// SetAside is the name it was renamed to (--set-aside-newer).
	SetAside string `json:"set_aside,omitempty"`
}

// newerSteps lists the folders of dir named as a step after restored
// (names read as the dcp layout reads folders), oldest first. Links are
// not followed.
func newerSteps(dir string, restored int64) ([]newerStep, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []newerStep
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		if n, ok := detect.DCPStepName(e.Name()); ok && n > restored {
			out = append(out, newerStep{Name: e.Name(), Step: n})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Step < out[j].Step })
	return out, nil
}

// handleNewer warns about, or with setAside renames, the newer folders.
func handleNewer(dir string, restored int64, setAside bool, log *zap.Logger) ([]newerStep, error) {
	newer, err := newerSteps(dir, restored)
	if err != nil || len(newer) == 0 {
		return nil, err
	}
	stamp := time.Now().UTC().Format("20060102T150405Z")
	for i := range newer {
		if !setAside {
			continue
		}
		to := newer[i].Name + detect.SetAsideMark + stamp
		if err := os.Rename(filepath.Join(dir, newer[i].Name), filepath.Join(dir, to)); err != nil {
			return newer, fmt.Errorf("--set-aside-newer: rename %s: %w", newer[i].Name, err)
		}
		newer[i].SetAside = to
	}
	for _, n := range newer {
		if n.SetAside != "" {
			log.Warn("a step folder newer than the restored step was set aside", zap.String("folder", n.Name), zap.Int64("step", n.Step), zap.String("renamed_to", n.SetAside))
		} else {
			log.Warn("a step folder newer than the restored step is in the target, not placed by this restore (a torn save, one never committed, or another run's): a trainer resuming from its newest folder would take it; move it away, or restore with --set-aside-newer",
				zap.String("folder", n.Name), zap.Int64("step", n.Step), zap.Int64("restored", restored))
		}
	}
	return newer, nil
}

// printNewer prints one line per newer folder for the text output.
func printNewer(w io.Writer, restored int64, newer []newerStep) {
	for _, n := range newer {
		if n.SetAside != "" {
			fmt.Fprintf(w, "set aside %s (step %d, newer than restored step %d) as %s\n", n.Name, n.Step, restored, n.SetAside)
			continue
		}
		fmt.Fprintf(w, "warning: %s (step %d) is newer than restored step %d and was not placed by this restore: a trainer resuming from its newest folder would take it; move it away or pass --set-aside-newer\n", n.Name, n.Step, restored)
	}
}
