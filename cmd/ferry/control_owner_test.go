//go:build linux

package main

import (
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

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
	pub, bin := publicFolder(t)
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
	asNobody := func(args ...string) result { return runAs(t, bin, 65534, args...) }
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

// publicFolder returns a folder every user can pass through and a copy of
// this test binary in it that every user can run (ferry, as the CLI tests
// run it); it skips the test unless it runs as root, which alone can run a
// command as another user.
func publicFolder(t *testing.T) (dir, bin string) {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("runs a command as another user: needs root")
	}
	dir = t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} { // the test's folder and this one
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bin = filepath.Join(dir, "ferry")
	copyExecutable(t, os.Args[0], bin)
	return dir, bin
}

// runAs runs ferry (bin) as the user and group numbered id.
func runAs(t *testing.T, bin string, id uint32, args ...string) result {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = filepath.Dir(bin)
	cmd.Env = []string{"FERRY_CLI_MAIN=1", "PATH=" + os.Getenv("PATH"), "HOME=" + filepath.Dir(bin)}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: id, Gid: id}}
	return run(t, cmd)
}

// TestControlGroup: with --control-group, the trainer's user (here nobody,
// a member of group 65534) reaches an agent that runs as another user
// (root): status answers and ferry commit commits the step it names. A
// user outside the group is refused in one line, and the journal stays
// the agent's alone.
func TestControlGroup(t *testing.T) {
	pub, bin := publicFolder(t)
	var r result
	watch := filepath.Join(pub, "ckpt")
	writeFile(t, filepath.Join(watch, "run-a", "model.bin"), randomBytes(1000, 1))
	base := filepath.Join(pub, "state")
	dest := "file://" + filepath.Join(pub, "bucket")
	if err := os.Mkdir(filepath.Join(pub, "bucket"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		mode fs.FileMode
		code int
	}{{0o700, 1}, {0o711, 0}} {
		if err := os.MkdirAll(base, c.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(base, c.mode); err != nil {
			t.Fatal(err)
		}
		// ferry doctor says beforehand what the agent would find.
		doc := ferry(t, nil, "doctor", "--quiet", "--watch", watch, "--to", dest, "--state-dir", base, "--control-group", "65534").stdout
		if failed := strings.Contains(doc, "fail control group: state dir "+base+" (mode 0700) does not let group 65534"); failed != (c.code != 0) ||
			(c.code == 0 && strings.Contains(doc, "control group")) {
			t.Errorf("doctor with a %04o state dir:\n%s", c.mode, doc)
		}
		a := startAgentProcess(t, nil, "--watch", watch, "--to", dest, "--state-dir", base, "--control-group", "65534",
			"--settle", "1h", "--metrics-addr", "off", "--priority", "normal")
		if c.code != 0 { // a state dir the group cannot pass: said at start
			err := waitExit(t, a.Cmd, time.Minute)
			if err == nil || !strings.Contains(a.logs.String(), "does not let group 65534 reach the control socket: chmod 0711 it") {
				t.Fatalf("agent with a 0700 state dir and --control-group: %v\n%s", err, a.logs.String())
			}
			continue
		}
		waitFor(t, "the agent answers", time.Minute, func() bool { return ferry(t, nil, "status", "--state-dir", base).code == 0 })
		if r := runAs(t, bin, 65534, "status", "--state-dir", base).must(t, 0); !strings.Contains(r.stdout, watch) {
			t.Errorf("status as a member of the group:\n%s", r.stdout)
		}
		runAs(t, bin, 65534, "commit", "--step", "7", "--state-dir", base, "--timeout", "1m", "run-a").must(t, 0)
		if got := ferry(t, nil, "list", "--from", dest).must(t, 0).stdout; !strings.Contains(got, "7") {
			t.Errorf("step 7 not committed after ferry commit by the group:\n%s", got)
		}
		groupMemberWhoCannotRead(t, bin, watch, base, dest)
		r = runAs(t, bin, 65533, "status", "--state-dir", base).must(t, 1)
		if !strings.Contains(r.stderr, control.NotOwnerFix) {
			t.Errorf("status outside the group: %q", r.stderr)
		}
		journals, _ := filepath.Glob(filepath.Join(base, "agents", "*", "journal*"))
		for _, j := range journals {
			if fi, err := os.Stat(j); err != nil || fi.Mode().Perm()&0o077 != 0 {
				t.Errorf("%s: %v (%v): want the agent's alone", j, fi.Mode(), err)
			}
		}
		if len(journals) == 0 {
			t.Error("no journal found to check")
		}
		_ = a.Process.Signal(syscall.SIGTERM)
		_ = waitExit(t, a.Cmd, time.Minute)
	}
	// An agent's user outside the group it names: doctor says so (among
	// other failures of a user who may not write here).
	if err := os.Chmod(filepath.Join(pub, "bucket"), 0o755); err != nil {
		t.Fatal(err)
	}
	r = runAs(t, bin, 65534, "doctor", "--quiet", "--watch", watch, "--to", dest, "--state-dir", base, "--control-group", "65533")
	if !strings.Contains(r.stdout, "fail control group: the agent's user is not a member of group 65533") {
		t.Errorf("doctor as a user outside --control-group:\n%s%s", r.stdout, r.stderr)
	}
	// The same run: the trainer's files (root's here) are not this user's,
	// and it holds no CAP_LEASE, so close-write detection cannot prove a
	// step finished: a warning with the fix.
	if !strings.Contains(r.stdout, "warn leases: a read lease on "+filepath.Join(watch, "run-a", "model.bin")+
		" is refused (permission denied): not the file's owner and no CAP_LEASE") ||
		!strings.Contains(r.stdout, "AmbientCapabilities=CAP_LEASE") {
		t.Errorf("doctor as a user without CAP_LEASE on root's files:\n%s", r.stdout)
	}
}

// groupMemberWhoCannotRead: a member of the control group who may not
// read the watch dir (0700, root's) learns nothing from status and cannot
// declare a step (issue 47: such a user declared step 999999999999 and
// --keep-remote pruned the real steps). Each is refused in one line.
func groupMemberWhoCannotRead(t *testing.T, bin, watch, base, dest string) {
	t.Helper()
	if err := os.Chmod(watch, 0o700); err != nil {
		t.Fatal(err)
	}
	defer os.Chmod(watch, 0o755)
	for _, args := range [][]string{
		{"status", "--state-dir", base},
		{"flush", "--state-dir", base, "--timeout", "10s"},
		{"commit", "--step", "999999999999", "--state-dir", base, "--timeout", "10s", "run-a/model.bin"},
	} {
		r := runAs(t, bin, 65534, args...).must(t, 1)
		if strings.Contains(r.stdout+r.stderr, watch) || !strings.Contains(r.stderr, "the agent refuses to answer this user") ||
			strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Errorf("ferry %s by a group member who cannot read the watch dir:\nstdout %q\nstderr %q", args[0], r.stdout, r.stderr)
		}
	}
	if got := ferry(t, nil, "list", "--from", dest).must(t, 0).stdout; strings.Contains(got, "999999999999") {
		t.Errorf("the refused declaration was committed:\n%s", got)
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

// TestRestoreIntoOthersFolderWarns: a restore into a folder that another
// (non-root) user owns says so, since that user could replace the
// restored files before the trainer loads them; into its own folder, or
// one root owns, it says nothing of the kind.
func TestRestoreIntoOthersFolderWarns(t *testing.T) {
	pub, bin := publicFolder(t)
	bucket := filepath.Join(pub, "bucket")
	for _, d := range []string{bucket, filepath.Join(pub, "theirs"), filepath.Join(pub, "mine"), filepath.Join(pub, "roots")} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(filepath.Join(pub, "theirs"), 65533, 65533); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(filepath.Join(pub, "mine"), 65534, 65534); err != nil {
		t.Fatal(err)
	}
	const warning = "the restore's target folder belongs to another user"
	for dir, warned := range map[string]bool{"theirs": true, "mine": false, "roots": false} {
		r := runAs(t, bin, 65534, "restore", "--from", "file://"+bucket, "--to", filepath.Join(pub, dir), "--allow-empty").must(t, 0)
		if strings.Contains(r.stderr, warning) != warned {
			t.Errorf("restore into %s (warning wanted: %v):\n%s", dir, warned, r.stderr)
		}
	}
}
