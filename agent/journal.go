package agent

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/ferrylabs/ferry/agent/control"
	"github.com/ferrylabs/ferry/agent/detect"
	"github.com/ferrylabs/ferry/internal/safepath"
	"github.com/ferrylabs/ferry/internal/statefile"
)

// maxJournalSteps bounds the journal; older committed steps are forgotten
// (they are in the bucket, which the agent lists at start).
const maxJournalSteps = 4096

// maxRemovedSteps bounds the entries of steps whose local files
// --keep-local deleted: beyond the newest ones they are forgotten as above.
// Without it the journal grew with every step seen up to maxJournalSteps
// (1.5 MB after 4,096 small steps, rewritten and fsynced twice per commit:
// make soak); with it, it is bounded by --keep-local plus this. A forgotten
// step saved again is committed in the bucket already and not revised.
const maxRemovedSteps = 256

// journal is the agent's record of committed steps, kept in the state dir,
// so that after a restart (SIGKILL included) no committed step is uploaded
// again, and --keep-local knows which local files are durable. Uploads in
// flight are recorded by the uploader's own per-step state files. It is
// mirrored by internal/statefile, durably: readers (status, the watcher)
// never wait on a fsync, and a change is on disk when its save returns.
type journal struct {
	f *statefile.File[journalData]
}

type journalData struct {
	Version   int              `json:"version"`
	Committed []committedEntry `json:"committed"`
	// Linked is set once the watcher saw Composer's latest-rank links in
	// the watch dir (detect.Options.Linked): after a restart a save
	// killed between removing its links and linking the new checkpoint
	// leaves no link, and only this says the checkpoints were linked.
	Linked bool `json:"linked,omitempty"`
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
	// Ahead is set while the step, committed by a declaration above every
	// step saved, is held out of retention (retention_hold.go): no later
	// step has passed it yet. Absent in journals written before it: such
	// steps count as usual.
	Ahead bool `json:"ahead,omitempty"`
}

type localFile struct {
	Path    string `json:"path"`
	Size    int64  `json:"size"`
	ModTime int64  `json:"mtime_ns"`
	// Dev and Ino identify the file committed (0 in journals written
	// before they were recorded): --keep-local deletes that file only.
	Dev uint64 `json:"dev,omitempty"`
	Ino uint64 `json:"ino,omitempty"`
}

func openJournal(stateDir string) (*journal, error) {
	path := filepath.Join(stateDir, "journal.json")
	data := journalData{Version: 1}
	raw, err := safepath.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("read journal: %w", err)
	default:
		data = journalData{}
		if err := json.Unmarshal(raw, &data); err != nil || data.Version != 1 {
			return nil, fmt.Errorf("journal %s is damaged (%s); move it away to start over (committed steps are found in the bucket again)", path, safepath.DecodeError(err))
		}
	}
	return &journal{f: statefile.New(path, "journal", data, true)}, nil
}

// get returns the entry of a committed step.
func (j *journal) get(step int64) (entry committedEntry, ok bool) {
	j.f.View(func(d *journalData) {
		i := slices.IndexFunc(d.Committed, func(e committedEntry) bool { return e.Step == step })
		if ok = i >= 0; ok {
			entry = d.Committed[i]
		}
	})
	return entry, ok
}

// findContent returns the committed step whose root and files (path, size,
// mtime) are exactly root and files: how a step numbered by a counter,
// whose number is not stable across restarts, is recognised.
func (j *journal) findContent(root string, files []localFile) (step int64, ok bool) {
	j.f.View(func(d *journalData) {
		i := slices.IndexFunc(d.Committed, func(e committedEntry) bool { return e.Root == root && sameLocalFiles(e.Files, files) })
		if ok = i >= 0; ok {
			step = d.Committed[i].Step
		}
	})
	return step, ok
}

// sameLocalFiles compares paths, sizes and mtimes: a file's identity
// (device and inode) may be missing from an older journal, and a file
// copied with its mtime is still the same content.
func sameLocalFiles(a, b []localFile) bool {
	return slices.EqualFunc(a, b, func(x, y localFile) bool {
		return x.Path == y.Path && x.Size == y.Size && x.ModTime == y.ModTime
	})
}

// localFiles is how the journal records a step's files.
func localFiles(s detect.Step) []localFile {
	out := make([]localFile, len(s.Files))
	for i, f := range s.Files {
		out[i] = localFile{Path: f.RelPath, Size: f.Size, ModTime: f.ModTime.UnixNano(), Dev: f.Dev, Ino: f.Ino}
	}
	return out
}

// add records a committed step and saves the journal.
func (j *journal) add(e committedEntry) error {
	return j.update(func(d *journalData) {
		out := d.Committed[:0]
		for _, old := range d.Committed {
			if old.Step != e.Step {
				out = append(out, old)
			}
		}
		out = append(out, e)
		slices.SortFunc(out, func(a, b committedEntry) int { return cmp.Compare(a.Step, b.Step) })
		if len(out) > maxJournalSteps {
			out = out[len(out)-maxJournalSteps:]
		}
		d.Committed = out
	})
}

// linked reports whether the watch dir's checkpoints were seen linked.
func (j *journal) linked() (linked bool) {
	j.f.View(func(d *journalData) { linked = d.Linked })
	return linked
}

// noteLinked records that the watch dir's checkpoints are linked; it
// writes the journal only the first time.
func (j *journal) noteLinked() error {
	if j.linked() {
		return nil
	}
	return j.update(func(d *journalData) { d.Linked = true })
}

// entries returns a copy of the committed entries, oldest first.
func (j *journal) entries() (out []committedEntry) {
	j.f.View(func(d *journalData) { out = slices.Clone(d.Committed) })
	return out
}

// markCommitted clears Pending once the step's manifest was seen.
func (j *journal) markCommitted(step int64) error {
	return j.update(func(d *journalData) {
		for i := range d.Committed {
			if d.Committed[i].Step == step {
				d.Committed[i].Pending = false
			}
		}
	})
}

// release clears Ahead on the held steps below step, and returns them.
func (j *journal) release(below int64) (released []int64, err error) {
	if !slices.ContainsFunc(j.entries(), func(e committedEntry) bool { return e.Ahead && e.Step < below }) {
		return nil, nil // nothing held below: no write
	}
	err = j.update(func(d *journalData) {
		released = released[:0]
		for i := range d.Committed {
			if e := &d.Committed[i]; e.Ahead && e.Step < below {
				e.Ahead = false
				released = append(released, e.Step)
			}
		}
	})
	return released, err
}

// markRemoved records that --keep-local deleted a step's local files,
// forgetting the oldest removed steps beyond maxRemovedSteps.
func (j *journal) markRemoved(step int64) error {
	return j.update(func(d *journalData) {
		removed := 0
		for i := range d.Committed {
			if d.Committed[i].Step == step {
				d.Committed[i].Removed = true
			}
			if d.Committed[i].Removed {
				removed++
			}
		}
		out := d.Committed[:0]
		for _, e := range d.Committed { // oldest first
			if e.Removed && removed > maxRemovedSteps {
				removed--
				continue
			}
			out = append(out, e)
		}
		d.Committed = out
	})
}

// update applies fn to the journal and saves it; it returns once the change
// is on disk.
func (j *journal) update(fn func(*journalData)) error {
	return j.f.Update(fn)
}

// lastCommitTime is when the newest step the journal holds as committed
// was committed (zero if none): the metrics' last commit at start.
func (j *journal) lastCommitTime() time.Time {
	var last time.Time
	for _, e := range j.entries() {
		if !e.Pending && e.Committed.After(last) {
			last = e.Committed
		}
	}
	return last
}

// lastCommitted returns the highest committed step known (the journal,
// this run's commits, the bucket at start), or -1.
func (a *Agent) lastCommitted() int64 {
	last := int64(-1)
	for _, e := range a.journal.entries() {
		if !e.Pending {
			last = max(last, e.Step)
		}
	}
	a.mu.Lock()
	for n, e := range a.steps {
		if e.status.State == control.StateCommitted {
			last = max(last, n)
		}
	}
	// Steps the bucket held when the agent started count too: an agent
	// started on a folder `ferry restore` filled knows its step committed.
	for n := range a.remote {
		last = max(last, n)
	}
	a.mu.Unlock()
	return last
}
