//go:build linux

package main

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/ferrylabs/ferry/agent"
	"github.com/ferrylabs/ferry/agent/control"
)

// TestControlCommandsAsAnotherUser: the agent's state folder and control
// socket are its user's alone. A command run by another user (the trainer
// calling ferry commit beside an agent the systemd unit runs as ferry) is
// told, in one line with exit 1, that the socket is not open to it and
// what to do, whether it looks for the agent (status) or names it
// (commit with --watch and --to).
func TestControlCommandsAsAnotherUser(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("runs a command as another user (nobody): needs root")
	}
	pub := t.TempDir()
	for _, d := range []string{filepath.Dir(pub), pub} { // the test's folder and this one
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(pub, "ferry")
	copyExecutable(t, os.Args[0], bin)
	watch := filepath.Join(pub, "ckpt")
	if err := os.MkdirAll(filepath.Join(watch, "step-1"), 0o755); err != nil {
		t.Fatal(err)
	}
	base := filepath.Join(pub, "state")
	id := agent.Identity{Watch: agent.CanonicalDir(watch), Destination: "s3://bucket/run"}
	srv, err := control.Listen(control.SocketPath(agent.AgentStateDir(base, id)), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	asNobody := func(args ...string) result {
		cmd := exec.Command(bin, args...)
		cmd.Dir = pub
		cmd.Env = []string{"FERRY_CLI_MAIN=1", "PATH=" + os.Getenv("PATH"), "HOME=" + pub}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		return run(t, cmd)
	}
	for _, args := range [][]string{
		{"status", "--state-dir", base},
		{"commit", "--step", "1", "--state-dir", base, "--watch", watch, "--to", "s3://bucket/run"},
	} {
		r := asNobody(args...).must(t, 1)
		if args[0] == "status" {
			if want := troubleshootingKey(ferryErrorLine(t, r.stderr)); !strings.Contains(troubleshootingPage(t), want) {
				t.Errorf("docs/troubleshooting.md does not show what ferry prints:\n  %s\n(masked: %q)", r.stderr, want)
			}
		}
		if !strings.Contains(r.stderr, "permission denied") || !strings.Contains(r.stderr, control.NotOwnerFix) ||
			strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Errorf("ferry %s as nobody: stderr %q, want one line saying permission denied and %q", args[0], r.stderr, control.NotOwnerFix)
		}
	}
}

// copyExecutable copies the program at from to to, mode 0755.
func copyExecutable(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
