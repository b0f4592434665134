//go:build linux

package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// otherUser is a user neither the agent (root) nor the caller (nobody) is.
const otherUser = 1000

// sightAgent starts an agent (root) on a watch dir every user may read,
// with --control-group 65534 so that nobody may call it, beside a copy of
// the binary nobody can run; it returns the watch dir, the state dir, the
// destination and the binary.
func sightAgent(t *testing.T) (watch, base, dest, bin string) {
	t.Helper()
	pub, bin := publicFolder(t)
	watch, base = filepath.Join(pub, "ckpt"), filepath.Join(pub, "state")
	dest = "file://" + filepath.Join(pub, "bucket")
	writeFile(t, filepath.Join(watch, "step-5", "model.bin"), randomBytes(4000, 5))
	for _, d := range []string{filepath.Join(pub, "bucket"), base} {
		if err := os.Mkdir(d, 0o711); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	a := startAgentProcess(t, nil, "--watch", watch, "--to", dest, "--state-dir", base, "--control-group", "65534",
		"--layout", "flat", "--step-pattern", `^step-(\d+)$`, "--settle", "1h", "--metrics-addr", "off", "--priority", "normal")
	t.Cleanup(func() {
		_ = a.Process.Signal(syscall.SIGTERM)
		_ = waitExit(t, a.Cmd, time.Minute)
	})
	waitFor(t, "the agent answers", time.Minute, func() bool { return ferry(t, nil, "status", "--state-dir", base).code == 0 })
	return watch, base, dest, bin
}

// hideFromNobody plants what nobody may not see in watch: another user's
// 0700 folder holding a key, another user's 0600 file, and a link to /.
func hideFromNobody(t *testing.T, watch string) {
	t.Helper()
	private := filepath.Join(watch, "private")
	writeFile(t, filepath.Join(private, "key.pem"), []byte("-----BEGIN PRIVATE KEY-----\n"))
	writeFile(t, filepath.Join(watch, "other.bin"), []byte("another user's bytes"))
	for p, mode := range map[string]os.FileMode{private: 0o700, filepath.Join(private, "key.pem"): 0o600, filepath.Join(watch, "other.bin"): 0o600} {
		if err := os.Chown(p, otherUser, otherUser); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("/", filepath.Join(watch, "r")); err != nil {
		t.Fatal(err)
	}
}

// Issue 47 item 4: ferry commit answers a path the caller may not see as
// it answers a missing one, word for word and with the same exit status:
// a file in another user's 0700 folder inside the watch dir, that folder
// itself, another user's 0600 file, and a file behind a link to /. The
// caller (nobody, in the control group, able to read the watch dir) still
// commits its own step, and root, the agent's user, still declares the
// file nobody could not. Before, the agent looked with its own (root's)
// rights: nobody's declaration of private/key.pem was taken (exit 0)
// while private/nokey.pem was "no such file" (exit 1).
func TestCommitAnswersUnseenAsMissing(t *testing.T) { commitSightCheck(t) }

// commitSightCheck runs TestCommitAnswersUnseenAsMissing's attack and the
// legitimate commits beside it (the attack sweep reruns it).
func commitSightCheck(t *testing.T) {
	watch, base, dest, bin := sightAgent(t)
	hideFromNobody(t, watch)
	for _, c := range [][2]string{
		{"private/key.pem", "private/nokey.pem"},
		{"private", "noprivate"},
		{"other.bin", "nother.bin"},
		{"r/etc/passwd", "r/etc/nopasswd"},
		{filepath.Join(watch, "private", "key.pem"), filepath.Join(watch, "private", "nokey.pem")},
	} {
		var answers [2]string
		var codes [2]int
		for i, p := range c {
			r := runAs(t, bin, 65534, "commit", "--step", "5", "--no-wait", "--state-dir", base, p)
			answers[i], codes[i] = strings.ReplaceAll(r.stdout+r.stderr, p, "PATH"), r.code
		}
		if answers[0] != answers[1] || codes[0] != codes[1] || codes[0] != 1 {
			t.Errorf("ferry commit by nobody of %s (exit %d) and of %s (exit %d) answer differently:\n  %q\n  %q",
				c[0], codes[0], c[1], codes[1], answers[0], answers[1])
		}
	}
	runAs(t, bin, 65534, "commit", "--step", "5", "--timeout", "1m", "--state-dir", base, "step-5").must(t, 0)
	if got := ferry(t, nil, "list", "--from", dest).must(t, 0).stdout; !strings.Contains(got, "5") {
		t.Errorf("nobody's own step 5 not committed:\n%s", got)
	}
	ferry(t, nil, "commit", "--step", "6", "--no-wait", "--state-dir", base, "private/key.pem").must(t, 0)
}
