//go:build unix

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// Issue 47 item 6: restore's warning looked only at the target folder, and
// never for root. It now covers every existing folder and link on the path
// to --to, for every caller. The first three cases were silent before;
// the honest targets stay silent.
func TestRestoreWarnsAboutThePath(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give folders and links to another user")
	}
	root := t.TempDir()
	mk := func(p string, mode os.FileMode, uid int) string {
		t.Helper()
		if err := os.MkdirAll(p, 0o755); err != nil || os.Chmod(p, mode) != nil || os.Lchown(p, uid, uid) != nil {
			t.Fatalf("make %s: %v", p, err)
		}
		return p
	}
	shared := mk(filepath.Join(root, "shared"), 0o777, 0)
	mk(filepath.Join(shared, "job"), 0o755, 0)
	theirs := mk(filepath.Join(root, "theirs"), 0o755, 65534)
	honest := mk(filepath.Join(root, "honest", "job"), 0o755, 0)
	tmp := mk(filepath.Join(root, "tmp"), os.ModeSticky|0o777, 0)
	mk(filepath.Join(tmp, "mine"), 0o700, 0)
	link := filepath.Join(root, "link")
	if err := os.Symlink(honest, link); err != nil || os.Lchown(link, 65534, 65534) != nil {
		t.Fatal(err)
	}
	for to, want := range map[string]string{
		filepath.Join(shared, "job", "ckpt"): "writable by others (mode 0777)",
		theirs:                               "owned by uid 65534",
		filepath.Join(link, "ckpt"):          "a symbolic link owned by uid 65534",
		filepath.Join(honest, "ckpt"):        "",
		filepath.Join(tmp, "mine", "ckpt"):   "",
	} {
		core, logs := observer.New(zap.WarnLevel)
		warnOthersFolder(to, zap.New(core))
		var got []string
		for _, e := range logs.All() {
			got = append(got, fmt.Sprint(e.Message, e.ContextMap()))
		}
		all := strings.Join(got, "\n")
		if (want == "") != (len(got) == 0) || want != "" && !strings.Contains(all, want) {
			t.Errorf("restore --to %s as root: warnings %q, want %q", to, all, want)
		}
	}
}
