package filestore_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/internal/store/storetest"
)

// mountTmpfs mounts a tmpfs of size bytes on a new folder and returns it;
// it skips the test where mounting is not permitted (not root, no
// CAP_SYS_ADMIN, a container without it) and unmounts when the test ends.
func mountTmpfs(t *testing.T, size int64) string {
	t.Helper()
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d", size)); err != nil {
		if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
			t.Skipf("mounting a tmpfs on %s is not permitted here (%v): run as root, or with CAP_SYS_ADMIN, to test a second filesystem", dir, err)
		}
		t.Fatalf("mount a tmpfs on %s: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// mountExt4 makes an ext4 filesystem of size bytes in a file, mounts it
// through a loop device on a new folder and returns the folder; it skips
// the test where mkfs.ext4 is missing or a loop mount is not permitted.
func mountExt4(t *testing.T, size int64) string {
	t.Helper()
	mkfs, err := exec.LookPath("mkfs.ext4")
	if err != nil {
		t.Skip("mkfs.ext4 is not installed (Debian: e2fsprogs): no ext4 to mount")
	}
	img := filepath.Join(t.TempDir(), "ext4.img")
	if err := os.WriteFile(img, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, size); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(mkfs, "-q", "-F", img).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4 %s: %v: %s", img, err, out)
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-o", "loop", img, dir).CombinedOutput(); err != nil {
		t.Skipf("a loop mount of an ext4 image is not permitted here (%v: %s): run as root with loop devices to test ext4", err, bytes.TrimSpace(out))
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// TestExt4 runs the store suite and the race of two processes on a
// loop-mounted ext4, where fsync and folder sync reach a disk (a tmpfs
// makes them no-ops).
func TestExt4(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: makes and mounts a filesystem")
	}
	mnt := mountExt4(t, 128<<20)
	t.Run("suite", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) store.Store { return newStore(t, mnt) })
	})
	t.Run("race", func(t *testing.T) {
		st := newStore(t, mnt)
		for i := range raceRounds() / 4 {
			race(t, st, fmt.Sprintf("k%d", i), "")
		}
	})
}

// device returns the device number of the filesystem holding path.
func device(t *testing.T, path string) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Dev
}

// TestSecondFilesystem runs the store suite, and the race of two
// processes, on a tmpfs mounted for the test, a filesystem other than the
// one of the test binary's temporary folder: a temporary file kept
// anywhere but below the store's root would make every link and rename
// fail there (EXDEV).
func TestSecondFilesystem(t *testing.T) {
	mnt := mountTmpfs(t, 256<<20)
	if device(t, mnt) == device(t, os.TempDir()) {
		t.Fatalf("the tmpfs on %s has the device of %s", mnt, os.TempDir())
	}
	t.Run("suite", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) store.Store { return newStore(t, mnt) })
	})
	t.Run("race", func(t *testing.T) {
		st := newStore(t, mnt)
		for i := range raceRounds() / 4 {
			race(t, st, fmt.Sprintf("k%d", i), "")
		}
	})
}

// TestFullFilesystem: a Put that does not fit fails with ENOSPC and
// leaves neither an object nor a temporary file; the store keeps working.
func TestFullFilesystem(t *testing.T) {
	mnt := mountTmpfs(t, 1<<20)
	st := newStore(t, mnt)
	big := storetest.RandomBytes(1, 2<<20)
	_, err := st.Put(t.Context(), "big", bytes.NewReader(big), int64(len(big)), store.PutOptions{})
	if !errors.Is(err, unix.ENOSPC) {
		t.Fatalf("Put of 2 MiB into a 1 MiB tmpfs: %v, want ENOSPC", err)
	}
	if _, err := st.Head(t.Context(), "big"); !errors.Is(err, store.ErrNotExist) {
		t.Errorf("Head after a failed Put: %v, want ErrNotExist", err)
	}
	storetest.MustPut(t, st, "small", []byte("fits"))
}

// TestReadOnlyFilesystem: a folder on a filesystem mounted read-only (a
// restore node's view of the checkpoints) serves Head, Get and List; a
// Put fails with EROFS and nothing else.
func TestReadOnlyFilesystem(t *testing.T) {
	mnt := mountTmpfs(t, 16<<20)
	st := newStore(t, mnt)
	data := storetest.RandomBytes(2, 1000)
	storetest.MustPut(t, st, "manifests/1.json", data)
	if err := unix.Mount("", mnt, "", unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		t.Fatalf("remount %s read-only: %v", mnt, err)
	}
	if got := storetest.MustGet(t, st, "manifests/1.json", 10, 20); !bytes.Equal(got, data[10:30]) {
		t.Errorf("ranged Get on a read-only filesystem returned %d bytes that differ", len(got))
	}
	var listed []string
	if err := st.List(t.Context(), "manifests/", "", 0, func(o store.ObjectInfo) error { listed = append(listed, o.Key); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(listed) != 1 || listed[0] != "manifests/1.json" {
		t.Errorf("List on a read-only filesystem = %q", listed)
	}
	_, err := st.Put(t.Context(), "manifests/2.json", bytes.NewReader(data), int64(len(data)), store.PutOptions{IfNoneMatch: true})
	if !errors.Is(err, unix.EROFS) {
		t.Errorf("Put on a read-only filesystem: %v, want EROFS", err)
	}
}
