package doctor

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/ferrylabs/ferry/internal/confine"
)

// filesystems names statfs f_type magic numbers; remote ones are those
// where inotify sees no change made on another host.
var filesystems = map[int64]string{
	0xEF53: "ext4", 0x58465342: "xfs", 0x9123683E: "btrfs", 0x01021994: "tmpfs", 0x794c7630: "overlay",
	0x2FC12FC1: "zfs", 0x6969: "NFS", 0x65735546: "FUSE", 0x0bd00bd0: "Lustre", 0xff534d42: "CIFS",
	0xfe534d42: "SMB2", 0x01021997: "9p", 0x47504653: "GPFS", 0x00c36400: "CephFS",
}

func remoteFilesystem(name string) bool {
	switch name {
	case "NFS", "FUSE", "Lustre", "CIFS", "SMB2", "9p", "GPFS", "CephFS":
		return true
	}
	return false
}

// diskSpace returns the bytes free to unprivileged users and the size of
// dir's filesystem, and the filesystem's name.
func diskSpace(dir string) (free, total int64, name string) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, 0, "unknown"
	}
	name = filesystems[int64(st.Type)]
	if name == "" {
		name = fmt.Sprintf("filesystem 0x%x", st.Type)
	}
	return int64(st.Bavail) * st.Bsize, int64(st.Blocks) * st.Bsize, name
}

func filesystemCheck(dir string, poll bool) Result {
	_, _, name := diskSpace(dir)
	if remoteFilesystem(name) && !poll {
		return warn("filesystem", "pass --poll (FERRY_POLL=true) unless the trainer writes from this host only",
			"%s is on %s: inotify sees no write made on another host", dir, name)
	}
	return ok("filesystem", "%s (%s)", name, map[bool]string{true: "polled", false: "inotify"}[poll])
}

// inotifyCheck compares the directories the agent would watch (each one
// twice: fsnotify and the close-write watch) with the user's limits.
func inotifyCheck(dir string, poll bool) Result {
	const check = "inotify"
	if poll {
		return skip(check, "--poll: inotify is not used")
	}
	watches, werr := readInt("/proc/sys/fs/inotify/max_user_watches")
	instances, ierr := readInt("/proc/sys/fs/inotify/max_user_instances")
	if werr != nil || ierr != nil {
		return warn(check, "", "limits unknown: %v", errors.Join(werr, ierr))
	}
	dirs := 0
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs++
		}
		return nil
	})
	need := 2 * dirs
	switch {
	case int64(need) > watches/2:
		return warn(check, "raise fs.inotify.max_user_watches (sysctl -w fs.inotify.max_user_watches=524288), or --poll",
			"%d directories need %d watches; the user's limit is %d, shared with every other watcher", dirs, need, watches)
	case instances < 8:
		return warn(check, "raise fs.inotify.max_user_instances (sysctl -w fs.inotify.max_user_instances=128)",
			"max_user_instances %d: each agent takes 2", instances)
	}
	return ok(check, "%d directories, %d watches needed; limits: %d watches, %d instances per user", dirs, need, watches, instances)
}

func readInt(path string) (int64, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
}

// capLease is CAP_LEASE's bit in /proc/self/status CapEff.
const capLease = 28

// leaseCheck tries the read lease close-write detection takes on the
// trainer's files, on a file of the watch dir if there is one.
func leaseCheck(dir string, closeWrite bool) Result {
	const check = "leases"
	if !closeWrite {
		return skip(check, "--close-write=false: every step waits out --settle")
	}
	fix := "run the agent as the trainer's user, or grant it CAP_LEASE (systemd: AmbientCapabilities=CAP_LEASE); until then steps wait out --settle"
	if v, err := readInt("/proc/sys/fs/leases-enable"); err == nil && v == 0 {
		return warn(check, "sysctl -w fs.leases-enable=1", "leases are disabled on this host (fs.leases-enable=0): steps wait out --settle")
	}
	file := firstFile(dir)
	if file == "" {
		fi, err := os.Stat(dir)
		if st, ok := fi.Sys().(*syscall.Stat_t); err == nil && ok && int(st.Uid) != os.Getuid() && !hasCap(capLease) {
			return warn(check, fix, "%s belongs to uid %d, the agent runs as uid %d without CAP_LEASE: it may not take leases on the trainer's files", dir, st.Uid, os.Getuid())
		}
		return ok(check, "no file to try yet; the agent's user owns %s or has CAP_LEASE", dir)
	}
	// As the agent's own probe: beneath the watch dir, no link followed
	// on the way, so a folder swapped for a link after the walk is not
	// followed out of it.
	d, err := confine.Open(dir)
	if err != nil {
		return warn(check, "make the watch dir readable by the agent", "%v", err)
	}
	defer d.Close()
	f, err := d.OpenFile(filepath.ToSlash(file))
	if err != nil {
		return warn(check, "make the trainer's files readable by the agent", "%v", err)
	}
	defer f.Close()
	file = f.Name()
	_, err = unix.FcntlInt(f.Fd(), unix.F_SETLEASE, unix.F_RDLCK)
	switch {
	case err == nil:
		_, _ = unix.FcntlInt(f.Fd(), unix.F_SETLEASE, unix.F_UNLCK)
		return ok(check, "a read lease on %s is granted: close-write detection can prove a writer is done", file)
	case errors.Is(err, unix.EAGAIN), errors.Is(err, unix.EBUSY):
		return ok(check, "%s is open for writing right now; leases are allowed", file)
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
		return warn(check, fix, "a read lease on %s is refused (%v): not the file's owner and no CAP_LEASE", file, err)
	}
	return warn(check, "", "a read lease on %s failed (%v): the filesystem may not support leases; steps wait out --settle", file, err)
}

// firstFile returns a regular file under dir (relative to it), "" if
// none is found soon.
func firstFile(dir string) string {
	found, seen := "", 0
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		seen++
		if err == nil && d.Type().IsRegular() {
			if rel, err := filepath.Rel(dir, p); err == nil {
				found = rel
			}
			return filepath.SkipAll
		}
		if seen > 10000 {
			return filepath.SkipAll
		}
		return nil
	})
	return found
}

// hasCap reports whether the process holds capability bit in its
// effective set.
func hasCap(bit uint) bool {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && caps&(1<<bit) != 0
		}
	}
	return false
}
