package doctor

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Issue 47 item 5: doctor said "ok state dir" for a world-writable folder
// owned by nobody. It now fails every state dir the agent would refuse,
// with one line of reason and one of remedy, and still passes a folder of
// the agent's own.
func TestStateDirCheckStrictModes(t *testing.T) {
	root := t.TempDir()
	own := filepath.Join(root, "own", "ferry") // not created yet: fine
	if r := stateDirCheck(own); r.Status != OK {
		t.Errorf("a state dir of the agent's own: %s %s", r.Status, r.Detail)
	}
	link := filepath.Join(root, "link")
	if err := os.Symlink(root, link); err != nil {
		t.Fatal(err)
	}
	cases := map[string]string{filepath.Join(link, "x"): "symbolic link"}
	if os.Geteuid() == 0 {
		nobody := filepath.Join(root, "nobody")
		if err := os.Mkdir(nobody, 0o700); err != nil || os.Chown(nobody, 65534, 65534) != nil || os.Chmod(nobody, 0o777) != nil {
			t.Fatal(err)
		}
		cases[nobody] = "owned by uid 65534"
	}
	for dir, want := range cases {
		r := stateDirCheck(dir)
		if r.Status != Fail || !strings.Contains(r.Detail, want) || r.Fix == "" || strings.Contains(r.Detail+r.Fix, "\n") {
			t.Errorf("state dir %s: %s %q (fix %q), want one failing line with %q and a remedy", dir, r.Status, r.Detail, r.Fix, want)
		}
	}
}
