//go:build unix

package peer

import (
	"bytes"
	"context"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/internal/heldfile"
	"github.com/ferrylabs/ferry/manifest"
)

// A seed (the agent, often root, serving a folder the training user
// writes) serves only regular files below its folder with one name, and
// only while they are the files it planned: a link on the way, a hard
// link, a FIFO or a device is not offered, and a file or folder swapped
// after the plan is not served (404: the asker goes to the bucket).
func TestSeedServesOnlyWhatIsBelowItsFolder(t *testing.T) {
	watch, outside := t.TempDir(), t.TempDir()
	secret := bytes.Repeat([]byte("S"), 100)
	write := func(path string, b []byte) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(outside, "x.bin"), secret)
	write(filepath.Join(outside, "swap.bin"), secret)
	write(filepath.Join(outside, "y.bin"), secret)
	write(filepath.Join(watch, "a", "ok.bin"), bytes.Repeat([]byte("o"), 100))
	write(filepath.Join(watch, "b", "swap.bin"), bytes.Repeat([]byte("b"), 100))
	write(filepath.Join(watch, "c", "replaced.bin"), bytes.Repeat([]byte("c"), 100))
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Link(filepath.Join(outside, "x.bin"), filepath.Join(watch, "a", "hard.bin")))
	must(syscall.Mkfifo(filepath.Join(watch, "a", "fifo"), 0o644))
	must(os.Symlink(outside, filepath.Join(watch, "link")))
	must(os.Symlink(filepath.Join(outside, "x.bin"), filepath.Join(watch, "a", "last.bin")))
	names := []string{"a/ok.bin", "a/hard.bin", "a/fifo", "link/y.bin", "a/last.bin", "b/swap.bin", "c/replaced.bin"}
	var files []heldfile.File
	for i, name := range names {
		files = append(files, heldfile.File{File: manifest.File{Path: name, Key: "run/data/k" + string(rune('0'+i)), Size: 100}, Path: filepath.FromSlash(name)})
	}
	st, _ := step(t, 10) // a seed serves from disk; it never reads the bucket
	addr := freeAddrs(t, 1)[0]
	seed, err := Seed(Config{Bucket: st, Key: testKey, Listener: listen(t, addr)}, func(context.Context, int64) (string, []heldfile.File, error) {
		return watch, files, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer seed.Close()
	start := time.Now()
	_, held := planKeys(t, addr, "/v1/plan?step=1&chunk=1048576&from=x&nonce="+newNonce())
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the plan took %s (a FIFO opened for reading?)", d)
	}
	slices.Sort(held)
	if want := []string{"run/data/k0", "run/data/k5", "run/data/k6"}; !slices.Equal(held, want) {
		t.Fatalf("the seed offers %v, want %v (ok.bin, swap.bin, replaced.bin)", held, want)
	}
	get := func(key string) (int, []byte) {
		return peerGet(t, addr, "/v1/range?"+url.Values{"key": {key}, "i": {"0"}, "skip": {"0"}, "n": {"100"}, "chunk": {"1048576"}}.Encode())
	}
	if code, body := get("run/data/k0"); code != 200 || !bytes.Equal(body, bytes.Repeat([]byte("o"), 100)) {
		t.Fatalf("ok.bin: %d %q", code, body)
	}
	// After the plan: b swapped for a link to the outside folder, whose
	// swap.bin has the same size; c/replaced.bin replaced by another file
	// of the same size and time.
	must(os.Rename(filepath.Join(watch, "b"), filepath.Join(watch, "b.old")))
	must(os.Symlink(outside, filepath.Join(watch, "b")))
	old, err := os.Stat(filepath.Join(watch, "c", "replaced.bin"))
	must(err)
	write(filepath.Join(watch, "c", "new"), bytes.Repeat([]byte("n"), 100))
	must(os.Chtimes(filepath.Join(watch, "c", "new"), old.ModTime(), old.ModTime()))
	must(os.Rename(filepath.Join(watch, "c", "new"), filepath.Join(watch, "c", "replaced.bin")))
	for _, key := range []string{"run/data/k1", "run/data/k2", "run/data/k3", "run/data/k4", "run/data/k5", "run/data/k6"} {
		if code, body := get(key); code != 404 {
			t.Errorf("%s: %d %q, want 404", key, code, body)
		}
	}
}
