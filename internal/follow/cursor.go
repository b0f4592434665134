package follow

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/ferrylabs/ferry/internal/atomicfile"
)

// CursorName is the cursor's file name in the followed folder.
const CursorName = ".ferry-follow.json"

// Step states in the cursor.
const (
	// StatePlacing: the step's folder is follow's and may be in place;
	// its command has not finished. A restart places it again.
	StatePlacing = "placing"
	// StateDone: placed and its command run.
	StateDone = "done"
	// StateDamaged: skipped as damaged; tried again only if its manifest
	// changes.
	StateDamaged = "damaged"
)

// Cursor is what follow knows of the run, kept in DIR/.ferry-follow.json.
type Cursor struct {
	// From is the run followed; a cursor of another run is refused.
	From  string           `json:"from"`
	Steps map[int64]*Entry `json:"steps"`
}

// Entry is the cursor's record of one step.
type Entry struct {
	// ETag is the manifest's ETag as the LIST showed it when the step was
	// handled, Revision the manifest's revision placed.
	ETag     string `json:"etag"`
	Revision int    `json:"revision"`
	State    string `json:"state"`
	// Folder is set while DIR/<step> is follow's own (placed, not yet
	// removed by Options.Keep).
	Folder bool `json:"folder,omitempty"`
	// Reason says why a damaged step was skipped.
	Reason string    `json:"reason,omitempty"`
	At     time.Time `json:"at"`
}

// loadCursor reads the cursor of dir, or returns an empty one for from.
func loadCursor(dir, from string) (*Cursor, error) {
	path := filepath.Join(dir, CursorName)
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return &Cursor{From: from, Steps: map[int64]*Entry{}}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read cursor: %w", err)
	}
	var c Cursor
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("read cursor %s: %w", path, err)
	}
	if c.From != from {
		return nil, fmt.Errorf("%s follows %s, not %s: use another folder", path, c.From, from)
	}
	if c.Steps == nil {
		c.Steps = map[int64]*Entry{}
	}
	return &c, nil
}

// save writes the cursor atomically and durably.
func (c *Cursor) save(dir string) error {
	data, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.Write(filepath.Join(dir, CursorName), data, 0o644); err != nil {
		return fmt.Errorf("write cursor: %w", err)
	}
	return nil
}

// folders returns the steps whose folders are follow's, oldest first.
func (c *Cursor) folders() []int64 {
	var out []int64
	for n, e := range c.Steps {
		if e.Folder {
			out = append(out, n)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}
