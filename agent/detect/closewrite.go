package detect

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// Close-write detection. A file whose writer has closed it, in a step the
// layout's rules find complete, need not wait out the settle window: the
// close is the writer saying it is done. fsnotify does not report closes
// (IN_CLOSE_WRITE is unexported), so on Linux a second inotify instance of
// the watcher's own reports them (closewrite_linux.go).
//
// Closes are recorded by inode, not by path, so a file written under a
// temporary name, or in a folder renamed into place (Orbax), is still known
// closed under its final name. A file is taken as closed only when
//
//   - its last inotify event was a close after writing (a later write, from
//     any descriptor, clears it),
//   - its size and modification time are those recorded at the close, and
//   - closeGrace has passed since the close.
//
// A file whose close was not seen (closed before its folder's watch was
// added, which a save of small files within the debounce window does, or
// before the agent started, or before a queue overflow dropped every
// record) is judged from what the kernel says now: unchanged and not open
// for writing by any process (the read lease), it counts as closed at its
// last modification. That takes a local filesystem: files written from
// other hosts (NFS, Lustre) fall back to the settle window, as do polling
// mode, platforms without inotify, and files the kernel will not lease. A writer that keeps writing
// through a memory mapping after closing its descriptor is not seen by
// inotify; such writers need CloseWrite off (--close-write=false).

// closeGrace is how long a closed file must stay unchanged before it counts.
const closeGrace = 200 * time.Millisecond

// fileID identifies a file across renames.
type fileID struct{ dev, ino uint64 }

// closeRecord is what a file looked like when its writer closed it.
type closeRecord struct {
	size    int64
	modTime time.Time
	at      time.Time
}

// closeTracker holds the close records; the inotify reader writes them and
// evaluations read them.
type closeTracker struct {
	root    string // the watched directory: files are looked at beneath it
	mu      sync.Mutex
	records map[fileID]closeRecord
}

func newCloseTracker(root string) *closeTracker {
	return &closeTracker{root: root, records: map[fileID]closeRecord{}}
}

// lstat describes the file at abs, a path under the root, looked up beneath
// the root (os.Root): a folder on the way swapped for a link to another
// folder is not followed there. It opens the root for each look, since
// the inotify reader calls it from its own goroutine.
func (c *closeTracker) lstat(abs string) (fs.FileInfo, error) {
	rel, err := filepath.Rel(c.root, abs)
	if err != nil || !filepath.IsLocal(rel) {
		return nil, fmt.Errorf("%s: not below the watched directory %s", abs, c.root)
	}
	r, err := os.OpenRoot(c.root)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return r.Lstat(rel)
}

// closed records that the file at abs was closed after writing, as it is
// now. It reports false when nothing is at abs (renamed or removed since).
func (c *closeTracker) closed(abs string, now time.Time) bool {
	fi, err := c.lstat(abs)
	if err != nil {
		return false
	}
	id, ok := idOf(fi)
	if !ok || !fi.Mode().IsRegular() {
		return true
	}
	c.mu.Lock()
	c.records[id] = closeRecord{size: fi.Size(), modTime: fi.ModTime(), at: now}
	c.mu.Unlock()
	return true
}

// written records that the file at abs was written: not closed any more.
func (c *closeTracker) written(abs string) {
	fi, err := c.lstat(abs)
	if err != nil {
		return
	}
	if id, ok := idOf(fi); ok {
		c.mu.Lock()
		delete(c.records, id)
		c.mu.Unlock()
	}
}

// reset forgets every record (events were lost).
func (c *closeTracker) reset() {
	c.mu.Lock()
	clear(c.records)
	c.mu.Unlock()
}

// closedAt looks up one file: unchanged is false when it is no longer as
// f records it; recorded is true, with the close's time, when its writer's
// close was seen with it as it is now.
func (c *closeTracker) closedAt(f File, abs string) (at time.Time, recorded, unchanged bool) {
	fi, err := c.lstat(abs)
	if err != nil || fi.Size() != f.Size || !fi.ModTime().Equal(f.ModTime) {
		return time.Time{}, false, false
	}
	id, ok := idOf(fi)
	if !ok {
		return time.Time{}, false, false
	}
	c.mu.Lock()
	r, ok := c.records[id]
	c.mu.Unlock()
	if !ok || r.size != fi.Size() || !r.modTime.Equal(fi.ModTime()) {
		return time.Time{}, false, true
	}
	return r.at, true, true
}
