//go:build linux

package detect

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ferrylabs/ferry/internal/confine"
)

// closeWatchMask is what the close watcher asks inotify for: closes after
// writing, and writes (which undo a close).
const closeWatchMask = unix.IN_CLOSE_WRITE | unix.IN_MODIFY | unix.IN_MOVED_FROM | unix.IN_MOVED_TO |
	unix.IN_DONT_FOLLOW | unix.IN_EXCL_UNLINK | unix.IN_ONLYDIR

// unmatchedFor is how long a close whose file was renamed before the event
// was read waits for the rename's events.
const unmatchedFor = 5 * time.Second

// closeWatch reads close and write events of the watched folders from an
// inotify instance of its own into a closeTracker.
type closeWatch struct {
	f       *os.File // the inotify descriptor, non-blocking, in Go's poller
	fd      int
	tracker *closeTracker

	mu   sync.Mutex
	dirs map[int]string // watch descriptor -> absolute folder

	// A close read after its file was renamed (written under a temporary
	// name, or in a folder renamed into place) cannot be stat'ed by its old
	// name: it waits in unmatched for the rename's events, which follow it
	// in the queue, and is then applied to the new name. Only run touches
	// these.
	unmatched map[string]time.Time // old path -> when closed
	movedFrom map[uint32]string    // rename cookie -> old path
}

func startCloseWatch(t *closeTracker) (*closeWatch, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("inotify_init1: %w", err)
	}
	return &closeWatch{f: os.NewFile(uintptr(fd), "inotify-close"), fd: fd, tracker: t, dirs: map[int]string{},
		unmatched: map[string]time.Time{}, movedFrom: map[uint32]string{}}, nil
}

// add watches the folder open as dir, named abs in events (adding it again
// is harmless). The watch is added through the open descriptor, not the
// path: a folder on the path swapped for a link since it was opened cannot
// move the watch outside the watched directory.
func (w *closeWatch) add(dir *os.File, abs string) error {
	wd, err := unix.InotifyAddWatch(w.fd, fmt.Sprintf("/proc/self/fd/%d", dir.Fd()), closeWatchMask&^unix.IN_DONT_FOLLOW)
	if errors.Is(err, unix.ENOENT) {
		// No /proc here: by path, the last component not followed.
		wd, err = unix.InotifyAddWatch(w.fd, abs, closeWatchMask)
	}
	if err != nil {
		return err
	}
	w.mu.Lock()
	w.dirs[wd] = abs
	w.mu.Unlock()
	return nil
}

// run reads events until close is called, and signals notify (without
// blocking) after each batch.
func (w *closeWatch) run(notify chan<- struct{}) error {
	buf := make([]byte, 64<<10)
	for {
		n, err := w.f.Read(buf)
		if errors.Is(err, os.ErrClosed) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read inotify close events: %w", err)
		}
		w.apply(buf[:n], time.Now())
		select {
		case notify <- struct{}{}:
		default:
		}
	}
}

// apply records one batch of events.
func (w *closeWatch) apply(buf []byte, now time.Time) {
	for off := 0; off+unix.SizeofInotifyEvent <= len(buf); {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
		nameBytes := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
		off += unix.SizeofInotifyEvent + int(ev.Len)
		if ev.Mask&unix.IN_Q_OVERFLOW != 0 {
			w.tracker.reset()
			clear(w.unmatched)
			continue
		}
		w.mu.Lock()
		dir, ok := w.dirs[int(ev.Wd)]
		if ev.Mask&unix.IN_IGNORED != 0 {
			delete(w.dirs, int(ev.Wd))
		}
		w.mu.Unlock()
		if !ok || ev.Len == 0 {
			continue
		}
		w.event(ev.Mask, ev.Cookie, filepath.Join(dir, unix.ByteSliceToString(nameBytes)), now)
	}
	for p, at := range w.unmatched {
		if now.Sub(at) > unmatchedFor {
			delete(w.unmatched, p)
		}
	}
}

// event applies one event to the path it names.
func (w *closeWatch) event(mask, cookie uint32, abs string, now time.Time) {
	switch {
	case mask&unix.IN_MODIFY != 0:
		delete(w.unmatched, abs)
		w.tracker.written(abs)
	case mask&unix.IN_CLOSE_WRITE != 0:
		if !w.tracker.closed(abs, now) {
			w.unmatched[abs] = now
		}
	case mask&unix.IN_MOVED_FROM != 0:
		w.movedFrom[cookie] = abs
	case mask&unix.IN_MOVED_TO != 0:
		from, ok := w.movedFrom[cookie]
		delete(w.movedFrom, cookie)
		if !ok {
			return
		}
		if mask&unix.IN_ISDIR != 0 {
			w.renameDir(from, abs)
		}
		for p, at := range w.unmatched {
			if rest, ok := underOrAt(p, from); ok {
				delete(w.unmatched, p)
				if !w.tracker.closed(abs+rest, at) {
					w.unmatched[abs+rest] = at // renamed again; its events follow
				}
			}
		}
	}
}

// renameDir makes events of watched folders at or below from name to.
func (w *closeWatch) renameDir(from, to string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for wd, d := range w.dirs {
		if rest, ok := underOrAt(d, from); ok {
			w.dirs[wd] = to + rest
		}
	}
}

// underOrAt returns what p has beyond dir ("" for dir itself, else
// "/..."), and whether p is dir or below it.
func underOrAt(p, dir string) (string, bool) {
	if p == dir {
		return "", true
	}
	if len(p) > len(dir) && p[:len(dir)] == dir && p[len(dir)] == '/' {
		return p[len(dir):], true
	}
	return "", false
}

func (w *closeWatch) close() error { return w.f.Close() }

// idOf returns a file's device and inode.
// changeTime returns the inode's change time (set by the kernel on every
// write, rename and link count change; no call sets it to another time).
func changeTime(fi os.FileInfo) time.Time {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return time.Unix(st.Ctim.Sec, st.Ctim.Nsec)
	}
	return time.Time{}
}

func idOf(fi os.FileInfo) (fileID, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileID{}, false
	}
	return fileID{dev: st.Dev, ino: st.Ino}, true
}

// openForWriting reports whether any process holds the file at abs open
// for writing, as the kernel sees it: a read lease (fcntl F_SETLEASE,
// F_RDLCK) is granted only on a file no descriptor has open for writing,
// and is released at once. A close-write event alone proves nothing: a
// second descriptor (a parallel writer, a plain touch) closes while the
// real writer still writes. Where the kernel refuses a lease (another
// user's file without CAP_LEASE, a filesystem without leases) the answer
// is unknown, reported as open with the error, and the settle window
// decides.
//
// While the lease is held (microseconds), a writer's open(2) waits for its
// release; one with O_NONBLOCK gets EWOULDBLOCK, which no trainer's
// checkpoint writer uses.
//
// The file is opened beneath root, following no link (internal/confine):
// a folder swapped for a link since the scan is refused, so the agent,
// often root, opens nothing outside the watched directory (through a link
// to /dev, a device node).
func openForWriting(root *confine.Dir, rel string) (bool, error) {
	f, err := root.OpenFile(rel)
	if err != nil {
		return true, err
	}
	defer f.Close()
	fd := f.Fd()
	_, err = unix.FcntlInt(fd, unix.F_SETLEASE, unix.F_RDLCK)
	switch {
	case err == nil:
		_, _ = unix.FcntlInt(fd, unix.F_SETLEASE, unix.F_UNLCK)
		return false, nil
	case errors.Is(err, unix.EAGAIN), errors.Is(err, unix.EBUSY):
		return true, nil
	}
	return true, fmt.Errorf("read lease on %s: %w", f.Name(), err)
}
