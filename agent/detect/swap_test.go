//go:build linux

package detect

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	"golang.org/x/sys/unix"
)

// TestLeaseProbeFollowsNoSwap: the probe asking the kernel whether a
// step's file is still open for writing (a read lease) opens the file
// beneath the watched directory, following no link: a step folder swapped
// for a link to another folder after the scan is refused and nothing
// there is opened. The agent runs as root: through a link to /dev the
// probe opened device nodes (/dev/watchdog arms a reboot when opened).
// The files outside have the scanned files' sizes and mtimes (a trainer
// can stat them and touch its own), so only the swap tells them apart.
func TestLeaseProbeFollowsNoSwap(t *testing.T) {
	root, outside := t.TempDir(), t.TempDir()
	write(t, root, "step_1/__0_0.distcp", "weights")
	write(t, root, "step_1/.metadata", "md")
	write(t, outside, "__0_0.distcp", "secrets")
	write(t, outside, ".metadata", "SE")
	for _, name := range []string{"__0_0.distcp", ".metadata"} {
		fi, err := os.Stat(filepath.Join(outside, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(filepath.Join(root, "step_1", name), fi.ModTime(), fi.ModTime()); err != nil {
			t.Fatal(err)
		}
	}
	w := newWatcher(t, Options{Dir: root, Layout: "dcp"})
	if err := w.rescan(nil); err != nil {
		t.Fatal(err)
	}
	w.closes = newCloseTracker(root)
	var c Candidate
	for _, name := range []string{".metadata", "__0_0.distcp"} {
		e, ok := w.tree.Get("step_1/" + name)
		if !ok {
			t.Fatalf("step_1/%s not scanned", name)
		}
		c.Step.Files = append(c.Step.Files, File{RelPath: e.Path, Size: e.Size, ModTime: e.ModTime})
	}
	if _, closed := w.closedAt(&c); !closed {
		t.Fatal("the step's files, closed, are not vouched for before the swap")
	}
	opened := swapStepForLink(t, root, outside, unix.IN_OPEN)
	if _, closed := w.closedAt(&c); closed {
		t.Error("the step is vouched for through a link to another folder")
	}
	if names := opened(); len(names) > 0 {
		t.Errorf("files outside the watched directory opened: %q", names)
	}
}

// swapStepForLink moves root's step_1 aside and puts a link to outside in
// its place, as a trainer racing the agent would. It returns what was
// opened in outside since the swap (the names of inotify's events of
// mask there; "" for the folder itself).
func swapStepForLink(t *testing.T, root, outside string, mask uint32) (opened func() []string) {
	t.Helper()
	if err := os.Rename(filepath.Join(root, "step_1"), filepath.Join(root, "aside")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(root, "step_1")); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if _, err := unix.InotifyAddWatch(fd, outside, mask); err != nil {
		t.Fatal(err)
	}
	return func() []string {
		buf := make([]byte, 4096)
		n, _ := unix.Read(fd, buf)
		var names []string
		for i := 0; i+unix.SizeofInotifyEvent <= n; {
			l := int(binary.NativeEndian.Uint32(buf[i+12 : i+16]))
			names = append(names, string(bytes.TrimRight(buf[i+unix.SizeofInotifyEvent:i+unix.SizeofInotifyEvent+l], "\x00")))
			i += unix.SizeofInotifyEvent + l
		}
		return names
	}
}

// TestListingFollowsNoSwap: a step folder swapped for a link to another
// folder between its lstat and its listing (or between the listing and an
// lstat of what it held) is neither listed nor stat'ed through the link:
// the tree gains no entry of the other folder and nothing opens it. The
// agent runs as root; listing by path let a trainer have it list and stat
// a folder it cannot read itself.
func TestListingFollowsNoSwap(t *testing.T) {
	root, outside := t.TempDir(), t.TempDir()
	for _, p := range []string{filepath.Join(root, "step_1", "__0_0.distcp"), filepath.Join(outside, "__0_0.distcp"), filepath.Join(outside, "id_ed25519")} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tr := newTree(root)
	if err := tr.scanAll(nil); err != nil {
		t.Fatal(err)
	}
	opened := swapStepForLink(t, root, outside, unix.IN_OPEN|unix.IN_ACCESS)
	// The scan's lstat saw a folder; the swap lands before its listing,
	// and before the lstat of a file it listed.
	_ = tr.scanDir("step_1", true, nil)
	tr.refreshEntry("step_1/__0_0.distcp")
	if e, ok := tr.Get("step_1/id_ed25519"); ok {
		t.Errorf("the other folder listed through the link: %+v", e)
	}
	if e, ok := tr.Get("step_1/__0_0.distcp"); ok && e.Err == nil {
		t.Errorf("a file of the other folder stat'ed through the link: %+v", e)
	}
	if names := opened(); len(names) > 0 {
		t.Errorf("the other folder was opened: %q", names)
	}
}

// TestWatchFollowsNoSwap: a folder swapped for a link to another folder
// before the watcher adds its inotify watches gets none: inotify resolves
// a path as the agent's user would, so a watch by path would have the
// agent, often root, watch the other folder and log what is created
// there under the watched names. Both watches are checked: fsnotify's
// (by path, removed again) and the close-write one (by descriptor).
func TestWatchFollowsNoSwap(t *testing.T) {
	root, outside := t.TempDir(), t.TempDir()
	write(t, root, "step_1/sub/__0_0.distcp", "weights")
	write(t, outside, "sub/id_ed25519", "key")
	w := newWatcher(t, Options{Dir: root, Layout: "dcp"})
	fsw, err := fsnotify.NewWatcher()
	if err != nil {
		t.Fatal(err)
	}
	defer fsw.Close()
	cw, err := startCloseWatch(newCloseTracker(root))
	if err != nil {
		t.Fatal(err)
	}
	defer cw.close()
	w.fsw, w.closeW = fsw, cw
	w.watchDir("step_1/sub")
	if got := fsw.WatchList(); len(got) != 1 || len(cw.dirs) != 1 {
		t.Fatalf("before the swap: fsnotify watches %q, close-write %v; want step_1/sub in each", got, cw.dirs)
	}
	opened := swapStepForLink(t, root, outside, unix.IN_OPEN)
	fsw.Remove(w.tree.abs("step_1/sub")) // the watch of the folder moved aside
	for wd := range cw.dirs {
		delete(cw.dirs, wd)
	}
	w.watchDir("step_1/sub")
	if got := fsw.WatchList(); len(got) != 0 {
		t.Errorf("fsnotify watches %q through the link to another folder", got)
	}
	if len(cw.dirs) != 0 {
		t.Errorf("close-write watches %v through the link to another folder", cw.dirs)
	}
	if names := opened(); len(names) > 0 {
		t.Errorf("the other folder was opened: %q", names)
	}
}

// TestCloseRecordsFollowNoSwap: a close event names a file by its watched
// path; the tracker looks at it beneath the watched directory, so a
// folder swapped for a link to another folder between the close and its
// look records nothing of the other folder's files (whose inodes would
// then be vouched for) and tells nothing of what exists there.
func TestCloseRecordsFollowNoSwap(t *testing.T) {
	root, outside := t.TempDir(), t.TempDir()
	write(t, root, "step_1/__0_0.distcp", "weights")
	write(t, outside, "__0_0.distcp", "secrets")
	c := newCloseTracker(root)
	abs := filepath.Join(root, "step_1", "__0_0.distcp")
	if !c.closed(abs, time.Now()) || len(c.records) != 1 {
		t.Fatalf("the step's own file is not recorded as closed: %v", c.records)
	}
	c.reset()
	swapStepForLink(t, root, outside, unix.IN_OPEN)
	if c.closed(abs, time.Now()) || len(c.records) != 0 {
		t.Errorf("a file of the other folder was recorded through the link: %v", c.records)
	}
	fi, err := os.Stat(filepath.Join(outside, "__0_0.distcp"))
	if err != nil {
		t.Fatal(err)
	}
	// As the scan would have seen it, had the trainer matched the other
	// file's size and mtime.
	if _, recorded, unchanged := c.closedAt(File{RelPath: "step_1/__0_0.distcp", Size: fi.Size(), ModTime: fi.ModTime()}, abs); recorded || unchanged {
		t.Errorf("the other folder's file was looked at through the link (recorded %v, unchanged %v)", recorded, unchanged)
	}
}
