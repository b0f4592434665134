package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/ferrylabs/ferry/uploader"
)

// maxJournalSteps bounds the journal; older committed steps are forgotten
// (they are in the bucket, and AlreadyDone also asks the bucket).
const maxJournalSteps = 4096

// journal is the agent's record of committed steps, kept in the state dir,
// so that after a restart (SIGKILL included) no committed step is uploaded
// again, and --keep-local knows which local files are durable. Uploads in
// flight are recorded by the uploader's own per-step state files.
type journal struct {
	path string
	mu   sync.Mutex
	data journalData
}

type journalData struct {
	Version   int              `json:"version"`
	Committed []committedEntry `json:"committed"`
}

// committedEntry records a committed step and its local files as they were
// when uploaded, so retention deletes only files that are still exactly
// what was made durable.
type committedEntry struct {
	Step      int64       `json:"step"`
	Root      string      `json:"root"`
	Committed time.Time   `json:"committed"`
	Files     []localFile `json:"files"`
	// Removed is set once --keep-local deleted the step's local files.
	Removed bool `json:"removed,omitempty"`
	// Pending is set when only this node's share was durable (multi-node)
	// and the step's manifest was not yet seen.
	Pending bool `json:"pending,omitempty"`
}

type localFile struct {
	Path    string `json:"path"`
	Size    int64  `json:"size"`
	ModTime int64  `json:"mtime_ns"`
}

func openJournal(stateDir string) (*journal, error) {
	j := &journal{path: filepath.Join(stateDir, "journal.json")}
	raw, err := os.ReadFile(j.path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		j.data.Version = 1
		return j, nil
	case err != nil:
		return nil, fmt.Errorf("read journal: %w", err)
	}
	if err := json.Unmarshal(raw, &j.data); err != nil || j.data.Version != 1 {
		return nil, fmt.Errorf("journal %s is damaged (%v); move it away to start over (committed steps are found in the bucket again)", j.path, err)
	}
	return j, nil
}

func (j *journal) isCommitted(step int64) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, e := range j.data.Committed {
		if e.Step == step {
			return true
		}
	}
	return false
}

// add records a committed step and saves the journal.
func (j *journal) add(e committedEntry) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := j.data.Committed[:0]
	for _, old := range j.data.Committed {
		if old.Step != e.Step {
			out = append(out, old)
		}
	}
	out = append(out, e)
	sort.Slice(out, func(a, b int) bool { return out[a].Step < out[b].Step })
	if len(out) > maxJournalSteps {
		out = out[len(out)-maxJournalSteps:]
	}
	j.data.Committed = out
	return j.saveLocked()
}

// entries returns a copy of the committed entries, oldest first.
func (j *journal) entries() []committedEntry {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]committedEntry(nil), j.data.Committed...)
}

// markCommitted clears Pending once the step's manifest was seen.
func (j *journal) markCommitted(step int64) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	for i := range j.data.Committed {
		if j.data.Committed[i].Step == step {
			j.data.Committed[i].Pending = false
		}
	}
	return j.saveLocked()
}

func (j *journal) markRemoved(step int64) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	for i := range j.data.Committed {
		if j.data.Committed[i].Step == step {
			j.data.Committed[i].Removed = true
		}
	}
	return j.saveLocked()
}

func (j *journal) saveLocked() error {
	raw, err := json.Marshal(&j.data)
	if err != nil {
		return fmt.Errorf("encode journal: %w", err)
	}
	if err := uploader.WriteFileAtomic(j.path, raw, 0o600); err != nil {
		return fmt.Errorf("save journal: %w", err)
	}
	return nil
}
