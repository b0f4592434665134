//go:build linux

package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/agent"
	"github.com/ferrylabs/ferry/agent/control"
	"github.com/ferrylabs/ferry/internal/s3proxy"
	"github.com/ferrylabs/ferry/internal/s3test"
	"github.com/ferrylabs/ferry/manifest"
)

// TestAttacksRerun is issue 47's target, rerun against the ferry binary:
// each attack of the list fails, and the legitimate use beside it
// (the trainer's own ferry commit, an honest restore, a peer restore)
// still works. Durations are the (the watch dir unreadable for
// 8 s, 10 s to commit the next step); only the agent's options are
// scaled: --settle 300ms (or 1h where ferry commit decides), and
// --rescan-interval 1s in 2a so that a rescan meets the outage (the
// default, a minute, might not: on 824cfb6 the agent then froze). The
// control flood is 19,000 connections, not 20,000: this process's
// descriptor limit is 20,000. The declaration flood runs on versitygw
// behind the fault proxy, which also refuses a manifest twice (2 s and
// 4 s of the agent's fixed backoff). 6b is a race: 40 doctor runs caught
// the old probe outside the watch dir in about half the sweeps on
// 824cfb6 (internal/doctor's TestLeaseProbeFollowsNoLink, 2,000 probes,
// is the deterministic check). On 824cfb6 every other attack succeeds.
// Most attacks are by other users (nobody, uid 1000): it needs root.
func TestAttacksRerun(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("reruns attacks by other users (nobody, uid 1000) on a root agent, and makes the watch dir unreadable to an agent run as nobody: needs root")
	}
	// The flood first and alone: it takes most of this process's descriptors.
	t.Run("2b-control-socket-idle-flood", attackControlFlood)
	for _, a := range []struct {
		name string
		run  func(*testing.T)
	}{
		{"1-group-member-wipes-steps", attackGroupMemberWipes},
		{"2a-watch-dir-unreadable-8s", attackWatchDirUnreadable},
		{"3-declaration-flood", attackDeclarationFlood},
		{"4-commit-probes-unseen-paths", func(t *testing.T) { commitSightCheck(t) }},
		{"5-state-dir-planted", attackStateDir},
		{"6a-restore-path-of-another-user", attackRestorePath},
		{"6b-doctor-lease-probe-swap", attackLeaseSwap},
		{"6c-peer-port-35-addresses", attackPeerAddresses},
	} {
		t.Run(a.name, func(t *testing.T) {
			t.Parallel()
			a.run(t)
		})
	}
}

// flatAgentArgs are the agent flags of the sweep: step-N folders, a watch
// dir, a destination, a state dir.
func flatAgentArgs(watch, dest, base string, more ...string) []string {
	return append([]string{"--watch", watch, "--to", dest, "--state-dir", base, "--layout", "flat",
		"--step-pattern", `^step-(\d+)$`, "--metrics-addr", "off", "--priority", "normal"}, more...)
}

// fileDest makes a file:// destination in dir, owned by uid, and returns
// its URL and the bucket folder.
func fileDest(t *testing.T, dir string, uid int) (string, string) {
	t.Helper()
	bucket := filepath.Join(dir, "bucket")
	for _, d := range []string{bucket, filepath.Join(bucket, "run")} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(d, uid, uid); err != nil {
			t.Fatal(err)
		}
	}
	return "file://" + bucket + "/run", bucket
}

// hasManifest reports whether step n is committed in the file:// bucket.
func hasManifest(bucket string, n int64) bool {
	_, err := os.Stat(filepath.Join(bucket, filepath.FromSlash(manifest.ManifestKey("run", n))))
	return err == nil
}

// stopOnCleanup ends the agent with SIGTERM when the test ends.
func stopOnCleanup(t *testing.T, a *agentProcess) {
	t.Cleanup(func() {
		if a.ProcessState == nil {
			_ = a.Process.Signal(syscall.SIGTERM)
			_ = waitExit(t, a.Cmd, time.Minute)
		}
	})
}

// memKB reads a field of /proc/PID/status in kB (VmRSS, VmHWM).
func memKB(pid int, field string) int64 {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n
		}
	}
	return -1
}

// fdsOf counts the open descriptors of process pid.
func fdsOf(pid int) int {
	ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	return len(ents)
}

// Attack 1: nobody, in the agent's --control-group but unable to read the
// 0700 watch dir, reads its status and declares step 999999999999 of
// step-300/.metadata under --keep-remote 1 --keep-local 1 (which pruned
// the real steps and deleted their files). Refused in one line naming
// nothing; the same declaration by root, who may read the dir, is
// refused as far beyond the steps known; step 300 stays in the bucket and
// on disk. Beside it the trainer's own ferry commit of steps 300 and 400;
// then a declaration within the bound (declaredAheadHeldOut).
func attackGroupMemberWipes(t *testing.T) {
	pub, bin := publicFolder(t)
	watch, base := filepath.Join(pub, "ckpt"), filepath.Join(pub, "state")
	dest, bucket := fileDest(t, pub, 0)
	writeFile(t, filepath.Join(watch, "step-300", "model.bin"), randomBytes(5000, 30))
	writeFile(t, filepath.Join(watch, "step-300", ".metadata"), []byte("meta 300"))
	if err := os.Mkdir(base, 0o711); err != nil || os.Chmod(base, 0o711) != nil || os.Chmod(watch, 0o700) != nil {
		t.Fatal(err)
	}
	a := startAgentProcess(t, nil, flatAgentArgs(watch, dest, base, "--control-group", "65534", "--settle", "1h",
		"--keep-remote", "1", "--keep-local", "1")...)
	stopOnCleanup(t, a)
	waitFor(t, "the agent answers", time.Minute, func() bool { return ferry(t, nil, "status", "--state-dir", base).code == 0 })
	ferry(t, nil, "commit", "--step", "300", "--state-dir", base, "--timeout", "1m", "step-300").must(t, 0)
	for _, args := range [][]string{
		{"status", "--state-dir", base},
		{"commit", "--step", "999999999999", "--state-dir", base, "--timeout", "10s", "step-300/.metadata"},
	} {
		r := runAs(t, bin, 65534, args...).must(t, 1)
		if strings.Contains(r.stdout+r.stderr, watch) || !strings.Contains(r.stderr, "the agent refuses to answer this user") ||
			strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Errorf("ferry %s by nobody: stdout %q stderr %q, want one refusal naming nothing", args[0], r.stdout, r.stderr)
		}
	}
	r := ferry(t, nil, "commit", "--step", "999999999999", "--state-dir", base, "--timeout", "10s", "step-300/.metadata").must(t, 1)
	if !strings.Contains(r.stderr, "above the newest step this agent knows (300)") || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
		t.Errorf("a far declaration by root: %q, want one line refusing it", r.stderr)
	}
	if _, err := os.Stat(filepath.Join(watch, "step-300", ".metadata")); err != nil || !hasManifest(bucket, 300) || hasManifest(bucket, 999999999999) {
		t.Fatalf("after the attack: step-300/.metadata %v, step 300 committed %v, fake step committed %v",
			err, hasManifest(bucket, 300), hasManifest(bucket, 999999999999))
	}
	writeFile(t, filepath.Join(watch, "step-400", "model.bin"), randomBytes(5000, 40))
	ferry(t, nil, "commit", "--step", "400", "--state-dir", base, "--timeout", "1m", "step-400").must(t, 0)
	if !hasManifest(bucket, 400) {
		t.Error("the trainer's step 400 is not committed")
	}
	declaredAheadHeldOut(t, a, watch, base, bucket)
}

// The rest of attack 1: a caller who may declare (here root) names a file
// of the watch dir's root as step 999000, within the bound above 400. The
// old agent kept it as the newest step and pruned, and deleted from disk,
// each real step right after its commit. Held out of retention, it stays
// beside the trainer's next step, 500, which is kept in the bucket and on
// disk while 400 goes.
func declaredAheadHeldOut(t *testing.T, a *agentProcess, watch, base, bucket string) {
	writeFile(t, filepath.Join(watch, "notes.bin"), []byte("a caller's file"))
	ferry(t, nil, "commit", "--step", "999000", "--state-dir", base, "--timeout", "1m", "notes.bin").must(t, 0)
	writeFile(t, filepath.Join(watch, "step-500", "model.bin"), randomBytes(5000, 50))
	ferry(t, nil, "commit", "--step", "500", "--state-dir", base, "--timeout", "1m", "step-500").must(t, 0)
	waitFor(t, "step 400 pruned", 30*time.Second, func() bool { return !hasManifest(bucket, 400) })
	_ = a.Process.Signal(syscall.SIGTERM)
	_ = waitExit(t, a.Cmd, time.Minute) // the last commit's retention is done when it exits
	_, err500 := os.Stat(filepath.Join(watch, "step-500", "model.bin"))
	_, err400 := os.Stat(filepath.Join(watch, "step-400"))
	if !hasManifest(bucket, 500) || !hasManifest(bucket, 999000) || hasManifest(bucket, 400) || err500 != nil || !os.IsNotExist(err400) {
		t.Errorf("after step 999000 was declared and 500 saved: committed 500 %v, 999000 %v, 400 %v; step-500 on disk: %v; step-400: %v",
			hasManifest(bucket, 500), hasManifest(bucket, 999000), hasManifest(bucket, 400), err500, err400)
	}
}

// Attack 2a: the watch dir unreadable (mode 0300) for 8 s to an agent
// running as nobody. A step written meanwhile is found once it is back,
// and the next step is committed within 10 s of the end of the outage.
func attackWatchDirUnreadable(t *testing.T) {
	dir, attr, bin := unprivilegedAgent(t)
	watch, state := filepath.Join(dir, "watch"), filepath.Join(dir, "state")
	dest, bucket := fileDest(t, dir, 65534)
	if err := os.Mkdir(state, 0o700); err != nil || os.Chown(state, 65534, 65534) != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(watch, "step-1", "model.bin"), randomBytes(64<<10, 1))
	cmd := exec.Command(bin, append([]string{"agent"}, flatAgentArgs(watch, dest, state, "--settle", "300ms", "--rescan-interval", "1s")...)...)
	cmd.Env = []string{"FERRY_CLI_MAIN=1", "PATH=" + os.Getenv("PATH"), "HOME=" + state}
	cmd.SysProcAttr = attr
	logs := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	a := &agentProcess{Cmd: cmd, logs: logs}
	stopOnCleanup(t, a)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("agent output:\n%s", logs.String())
		}
	})
	waitFor(t, "step 1 committed", 30*time.Second, func() bool { return hasManifest(bucket, 1) })
	if err := os.Chmod(watch, 0o300); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	time.Sleep(time.Second)
	writeFile(t, filepath.Join(watch, "step-2", "model.bin"), randomBytes(64<<10, 2))
	time.Sleep(time.Until(start.Add(8 * time.Second)))
	if err := os.Chmod(watch, 0o755); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	writeFile(t, filepath.Join(watch, "step-3", "model.bin"), randomBytes(64<<10, 3))
	for !hasManifest(bucket, 3) || !hasManifest(bucket, 2) {
		// A process that exited (not waited for yet) has no VmRSS.
		if alive := memKB(cmd.Process.Pid, "VmRSS") > 0; !alive || time.Since(back) > 10*time.Second {
			t.Fatalf("10 s after the watch dir came back: steps 2 and 3 committed %v %v, agent alive %v",
				hasManifest(bucket, 2), hasManifest(bucket, 3), alive)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("step 3 committed %v after the watch dir came back", time.Since(back).Round(time.Millisecond))
	if !strings.Contains(logs.String(), "cannot watch") {
		t.Error("the outage was not logged")
	}
}

// dialAll opens n connections to the unix socket sock, retrying one the
// kernel's backlog refuses for a moment.
func dialAll(t *testing.T, sock string, n int) []net.Conn {
	t.Helper()
	conns := make([]net.Conn, 0, n)
	for fails := 0; len(conns) < n; {
		c, err := net.Dial("unix", sock)
		if err != nil {
			if fails++; fails > 1000 {
				t.Fatalf("connection %d: %v", len(conns), err)
			}
			time.Sleep(time.Millisecond)
			continue
		}
		conns = append(conns, c)
	}
	return conns
}

// Attack 2b: 19,000 idle connections held on the control socket, then
// released (before: 20,000 descriptors, 428 MB, and a frozen agent). The
// agent keeps at most a bounded number of descriptors and under 100 MB;
// ferry status answers and the trainer's ferry commit is durable during
// the flood; after it, the next step is committed within 10 s.
func attackControlFlood(t *testing.T) {
	root := t.TempDir()
	watch, base := filepath.Join(root, "ckpt"), filepath.Join(root, "state")
	dest, bucket := fileDest(t, root, 0)
	writeFile(t, filepath.Join(watch, "step-1", "model.bin"), randomBytes(64<<10, 1))
	a := startAgentProcess(t, nil, flatAgentArgs(watch, dest, base, "--settle", "1h")...)
	stopOnCleanup(t, a)
	waitFor(t, "the agent answers", time.Minute, func() bool { return ferry(t, nil, "status", "--state-dir", base).code == 0 })
	loc, err := parseLocation("--to", dest)
	if err != nil {
		t.Fatal(err)
	}
	sock := control.SocketPath(agent.AgentStateDir(base, agentIdentity(watch, loc)))
	pid := a.Process.Pid
	start := time.Now()
	conns := dialAll(t, sock, 19000)
	t.Logf("19,000 connections in %v; agent: %d descriptors, %d kB", time.Since(start).Round(time.Millisecond), fdsOf(pid), memKB(pid, "VmRSS"))
	ferry(t, nil, "status", "--state-dir", base).must(t, 0)
	ferry(t, nil, "commit", "--step", "1", "--state-dir", base, "--timeout", "1m", "step-1").must(t, 0)
	if n := fdsOf(pid); n > 400 {
		t.Errorf("the agent holds %d descriptors during the flood", n)
	}
	for _, c := range conns {
		c.Close()
	}
	back := time.Now()
	writeFile(t, filepath.Join(watch, "step-2", "model.bin"), randomBytes(64<<10, 2))
	ferry(t, nil, "commit", "--step", "2", "--state-dir", base, "--timeout", "10s", "step-2").must(t, 0)
	if took := time.Since(back); took > 10*time.Second || !hasManifest(bucket, 2) {
		t.Errorf("step 2 after the flood: committed %v in %v", hasManifest(bucket, 2), took)
	}
	if hwm := memKB(pid, "VmHWM"); hwm > 100<<10 {
		t.Errorf("the agent's peak RSS was %d kB, want under 100 MB", hwm)
	}
}

// Attack 3: 1,000 declarations (10 steps, each declared 100 times, half
// naming its folder, half its file ten times and the folder), 50 at once;
// a step of 2^63-1; the store refusing step 5's manifest twice. Every
// byte is uploaded once, the agent stays under 100 MB, the huge step is
// refused in one line, ferry flush returns 0, and the trainer's own
// ferry commit of step 11 is durable.
func attackDeclarationFlood(t *testing.T) {
	srv := s3test.Shared(t)
	view, px := srv.WithProxy(t, s3proxy.Config{})
	bucket := srv.NewBucket(t)
	url := "s3://" + bucket + "/run"
	watch, base := t.TempDir(), t.TempDir()
	var total int64
	writeStep := func(k int) {
		for name, size := range map[string]int{"model.bin": 1 << 20, "extra.bin": 100 << 10} {
			writeFile(t, filepath.Join(watch, fmt.Sprintf("step-%d", k), name), randomBytes(size, byte(k)))
			total += int64(size)
		}
	}
	for k := 1; k <= 10; k++ {
		writeStep(k)
	}
	if err := px.SetRules(s3proxy.Rule{Ops: []string{s3proxy.OpPutObject}, KeyPrefix: manifest.ManifestKey("run", 5), Times: 2,
		Action: s3proxy.Status(403, "AccessDenied")}); err != nil {
		t.Fatal(err)
	}
	a := startAgentProcess(t, view.Env(), flatAgentArgs(watch, url, base, "--settle", "1h")...)
	stopOnCleanup(t, a)
	waitFor(t, "the agent answers", time.Minute, func() bool { return ferry(t, nil, "status", "--state-dir", base).code == 0 })
	loc, err := parseLocation("--to", url)
	if err != nil {
		t.Fatal(err)
	}
	cl := control.Dial(agent.AgentStateDir(base, agentIdentity(watch, loc)))
	var refused atomic.Int64
	var wg sync.WaitGroup
	next := make(chan int)
	for range 50 {
		wg.Go(func() {
			for i := range next {
				step := int64(i%10 + 1)
				paths := []string{fmt.Sprintf("step-%d", step)}
				if i%2 == 1 {
					for range 10 {
						paths = append(paths, fmt.Sprintf("step-%d/model.bin", step))
					}
				}
				if err := cl.Commit(context.Background(), step, paths, false, 0); err != nil {
					if refused.Add(1) == 1 {
						t.Errorf("declaration %d of step %d: %v", i, step, err)
					}
				}
			}
		})
	}
	for i := range 1000 {
		next <- i
	}
	close(next)
	wg.Wait()
	r := ferry(t, nil, "commit", "--step", "9223372036854775807", "--no-wait", "--state-dir", base).must(t, 1)
	if !strings.Contains(r.stderr, "outside 0..999999999999") || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
		t.Errorf("step 2^63-1: %q, want one line refusing it", r.stderr)
	}
	ferry(t, nil, "flush", "--state-dir", base, "--timeout", "1m").must(t, 0)
	writeStep(11) // the trainer's next step, after the flood
	ferry(t, nil, "commit", "--step", "11", "--state-dir", base, "--timeout", "1m", "step-11").must(t, 0)
	var sent int64
	denied := 0
	for _, q := range px.Requests() {
		if (q.Op == s3proxy.OpPutObject || q.Op == s3proxy.OpUploadPart) && strings.HasPrefix(q.Key, "run/data/") && q.Status == 200 {
			sent += q.ContentLength
		}
		if q.Key == manifest.ManifestKey("run", 5) && q.Status == 403 {
			denied++
		}
	}
	if denied != 2 {
		t.Errorf("step 5's manifest was refused %d times, want the rule's 2", denied)
	}
	if sent != total || refused.Load() != 0 {
		t.Errorf("%d bytes of data sent for %d bytes of 11 steps (%d declarations refused), want each byte once", sent, total, refused.Load())
	}
	if hwm := memKB(a.Process.Pid, "VmHWM"); hwm > 100<<10 {
		t.Errorf("the agent's peak RSS was %d kB, want under 100 MB", hwm)
	}
	if got := committed(t, srv.Store(t, bucket), "run"); len(got) != 11 {
		t.Errorf("committed steps %v, want 1 to 11", got)
	}
}

// Attack 5: a state dir another user prepared. In a root-owned sticky
// base (as /tmp), nobody made agents/ and linked the agent's predictable
// folder to a victim's: the agent refuses to start, and neither chmods
// nor writes the victim's folder. In a folder of root's own, a
// journal.json linked to a secret: refused, and the secret is not
// quoted. ferry doctor fails a world-writable base nobody owns. Beside
// them an agent on a state dir of root's own starts, doctor says ok, and
// the trainer's ferry commit is durable.
func attackStateDir(t *testing.T) {
	pub, _ := publicFolder(t)
	watch := filepath.Join(pub, "ckpt")
	writeFile(t, filepath.Join(watch, "step-1", "model.bin"), randomBytes(4000, 1))
	dest, bucket := fileDest(t, pub, 0)
	loc, err := parseLocation("--to", dest)
	if err != nil {
		t.Fatal(err)
	}
	id := agentIdentity(watch, loc)
	mk := func(p string, uid int, mode os.FileMode) string {
		if err := os.MkdirAll(p, 0o700); err != nil || os.Chown(p, uid, uid) != nil || os.Chmod(p, mode) != nil {
			t.Fatal(err)
		}
		return p
	}
	sticky, victim := mk(filepath.Join(pub, "tmp"), 0, os.ModeSticky|0o777), mk(filepath.Join(pub, "victim"), otherUser, 0o755)
	mk(filepath.Join(sticky, "agents"), 65534, 0o777)
	if err := os.Symlink(victim, agent.AgentStateDir(sticky, id)); err != nil || os.Lchown(agent.AgentStateDir(sticky, id), 65534, 65534) != nil {
		t.Fatal(err)
	}
	good := mk(filepath.Join(pub, "good"), 0, 0o700)
	secret := filepath.Join(pub, "shadow")
	writeFile(t, secret, []byte("root:$6$topsecret:19000::::::\n"))
	if err := os.Chmod(secret, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, filepath.Join(mk(agent.AgentStateDir(good, id), 0, 0o700), "journal.json")); err != nil {
		t.Fatal(err)
	}
	for _, base := range []string{sticky, good} {
		a := startAgentProcess(t, nil, flatAgentArgs(watch, dest, base, "--settle", "1h")...)
		if err := waitExit(t, a.Cmd, 30*time.Second); err == nil || strings.Contains(a.logs.String(), "topsecret") || strings.Contains(a.logs.String(), "root:$") {
			t.Errorf("agent on the planted state dir %s: %v\n%s", base, err, a.logs.String())
		}
	}
	if fi, err := os.Stat(victim); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("the victim's folder: %v %v, want mode 0755 untouched", fi.Mode(), err)
	}
	if ents, _ := os.ReadDir(victim); len(ents) != 0 {
		t.Errorf("the agent wrote into the victim's folder: %s", ents[0].Name())
	}
	careless := mk(filepath.Join(pub, "careless"), 65534, 0o777)
	if out := ferry(t, nil, "doctor", "--quiet", "--watch", watch, "--to", dest, "--state-dir", careless).stdout; !strings.Contains(out, "fail state dir") {
		t.Errorf("doctor on a world-writable state dir of nobody's:\n%s", out)
	}
	mine := mk(filepath.Join(pub, "mine"), 0, 0o700)
	if out := ferry(t, nil, "doctor", "--quiet", "--watch", watch, "--to", dest, "--state-dir", mine).stdout; strings.Contains(out, "state dir") {
		t.Errorf("doctor on a state dir of root's own says:\n%s", out)
	}
	a := startAgentProcess(t, nil, flatAgentArgs(watch, dest, mine, "--settle", "1h")...)
	stopOnCleanup(t, a)
	waitFor(t, "the agent answers", time.Minute, func() bool { return ferry(t, nil, "status", "--state-dir", mine).code == 0 })
	ferry(t, nil, "commit", "--step", "1", "--state-dir", mine, "--timeout", "1m", "step-1").must(t, 0)
	if !hasManifest(bucket, 1) {
		t.Error("the trainer's step 1 is not committed")
	}
}

// Attack 6a: restores, root's included, into a folder below one of
// another user's (who could swap the files before torch.load) or below a
// link another user owns: warned, naming it. Beside them an honest
// restore into root's own folder: no warning, every byte right.
func attackRestorePath(t *testing.T) {
	pub, _ := publicFolder(t)
	src := filepath.Join(pub, "src")
	writeFile(t, filepath.Join(src, "model.bin"), randomBytes(70000, 6))
	dest, _ := fileDest(t, pub, 0)
	ferry(t, nil, "push", "--to", dest, "--step", "6", src).must(t, 0)
	theirs := filepath.Join(pub, "theirs")
	if err := os.Mkdir(theirs, 0o755); err != nil || os.Chown(theirs, otherUser, otherUser) != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"roots", "linked"} {
		if err := os.Mkdir(filepath.Join(pub, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	link := filepath.Join(pub, "via")
	if err := os.Symlink(filepath.Join(pub, "linked"), link); err != nil || os.Lchown(link, otherUser, otherUser) != nil {
		t.Fatal(err)
	}
	for to, why := range map[string]string{
		filepath.Join(theirs, "job", "ckpt"): "owned by uid 1000",
		filepath.Join(link, "ckpt"):          "a symbolic link owned by uid 1000",
		filepath.Join(pub, "roots", "ckpt"):  "",
	} {
		r := ferry(t, nil, "restore", "--from", dest, "--to", to).must(t, 0)
		if warned := strings.Contains(r.stderr, "can be changed by another user"); warned != (why != "") || !strings.Contains(r.stderr, why) {
			t.Errorf("restore into %s (want warning %q):\n%s", to, why, r.stderr)
		}
		sameFiles(t, src, to)
	}
}

// Attack 6b: ferry doctor's lease probe while step/ flips between a real
// folder and a link to a folder outside holding a file of the same name
// held open for writing (1 run in 20 went outside before). No run says
// the outside file is open for writing; beside it, the trainer's file in
// the watch dir held open for writing is reported so.
func attackLeaseSwap(t *testing.T) {
	root := t.TempDir()
	watch, outside := filepath.Join(root, "watch"), filepath.Join(root, "outside")
	real, aside := filepath.Join(watch, "step"), filepath.Join(root, "aside")
	writeFile(t, filepath.Join(real, "a.bin"), []byte("x"))
	writeFile(t, filepath.Join(outside, "a.bin"), []byte("y"))
	dest, _ := fileDest(t, root, 0)
	w, err := os.OpenFile(filepath.Join(outside, "a.bin"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Go(func() {
		for !stop.Load() {
			_ = os.Rename(real, aside)
			_ = os.Symlink(outside, real)
			_ = os.Remove(real)
			_ = os.Rename(aside, real)
		}
	})
	state := t.TempDir()
	doctor := func() string {
		return ferry(t, nil, "doctor", "--watch", watch, "--to", dest, "--state-dir", state).stdout
	}
	// 40 runs, 8 at once (each spends a second watching the watch dir).
	var outsideSeen atomic.Int64
	var runs sync.WaitGroup
	for range 8 {
		runs.Go(func() {
			for range 5 {
				if strings.Contains(doctor(), "open for writing right now") {
					outsideSeen.Add(1)
				}
			}
		})
	}
	runs.Wait()
	stop.Store(true)
	wg.Wait()
	if outsideSeen := outsideSeen.Load(); outsideSeen > 0 {
		t.Errorf("ferry doctor's lease probe reached the file outside the watch dir in %d runs of 40", outsideSeen)
	}
	tw, err := os.OpenFile(filepath.Join(real, "a.bin"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer tw.Close()
	if out := doctor(); !strings.Contains(out, filepath.Join(real, "a.bin")+" is open for writing right now") {
		t.Errorf("doctor with the trainer's file open for writing:\n%s", out)
	}
}

// Attack 6c: 35 addresses (127.0.0.2 to .36) each holding 10 connections
// to a restoring node's peer port (35 addresses got past the per-address
// cap). With --peer-allow peers every one is closed unanswered; the two
// nodes of the job restore together beside them, every file right.
func attackPeerAddresses(t *testing.T) {
	srv := s3test.Shared(t)
	url, src := pushPeerStep(t, srv)
	addrs := freePorts(t, 2)
	first := startPeerRestore(t, srv, url, addrs, 0, "--peer-allow", "peers")
	waitFor(t, "node 0's peer port", 30*time.Second, func() bool { return askPeerPort(t, addrs[0], "127.0.0.1") == "401 Unauthorized" })
	var answered atomic.Int64
	var wg sync.WaitGroup
	for i := range 35 {
		for range 10 {
			wg.Go(func() {
				if got := askPeerPort(t, addrs[0], fmt.Sprintf("127.0.0.%d", i+2)); got != "closed" {
					answered.Add(1)
				}
			})
		}
	}
	wg.Wait()
	if n := answered.Load(); n != 0 {
		t.Errorf("%d of 350 connections from 35 addresses outside --peers were not closed at once", n)
	}
	second := startPeerRestore(t, srv, url, addrs, 1, "--peer-allow", "peers")
	for i, r := range []peerRestore{first, second} {
		if err := r.cmd.Wait(); err != nil {
			t.Fatalf("node %d: %v\n%s", i, err, r.stderr.String())
		}
		var sum restoreSummary
		decodeJSON(t, r.stdout.String(), &sum)
		if sum.Peers == nil || sum.Peers.Joined != 1 || sum.Files != 2 {
			t.Fatalf("node %d: %+v\n%s", i, sum.Peers, r.stderr.String())
		}
		sameFiles(t, src, r.to)
	}
}
