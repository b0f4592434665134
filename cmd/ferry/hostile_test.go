package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/zeebo/blake3"

	"github.com/ferrylabs/ferry/agent/control"
	"github.com/ferrylabs/ferry/internal/remote"
	"github.com/ferrylabs/ferry/internal/s3proxy"
	"github.com/ferrylabs/ferry/internal/s3test"
	"github.com/ferrylabs/ferry/internal/store"
	"github.com/ferrylabs/ferry/internal/trainsim"
	"github.com/ferrylabs/ferry/manifest"
)

func blake3Hex(data []byte) string {
	sum := blake3.Sum256(data)
	return hex.EncodeToString(sum[:])
}

func putRaw(t *testing.T, srv *s3test.Server, bucket, key string, data []byte) {
	t.Helper()
	if _, err := srv.Client(t).PutObject(context.Background(), &s3.PutObjectInput{
		Bucket: aws.String(bucket), Key: aws.String(key), Body: bytes.NewReader(data),
	}); err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
}

// listTree returns every path under dir, relative, with "@target" for
// symlinks, sorted.
func listTree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if p == dir {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		if fi.Mode()&os.ModeSymlink != 0 {
			target, _ := os.Readlink(p)
			rel += "@" + target
		}
		out = append(out, rel)
		return nil
	})
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// ferryErrorLine returns the one "ferry: ..." line of stderr, failing t
// when there is not exactly one.
func ferryErrorLine(t *testing.T, stderr string) string {
	t.Helper()
	var lines []string
	for _, l := range strings.Split(stderr, "\n") {
		if strings.HasPrefix(l, "ferry: ") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 1 {
		t.Fatalf("want exactly one error line, got %d in:\n%s", len(lines), stderr)
	}
	return lines[0]
}

// TestCLIRestoreRejectsHostileManifests writes hostile manifests with a
// plain S3 client, with real objects behind every entry, and restores each:
// ferry must refuse before writing anything, naming the field or path.
func TestCLIRestoreRejectsHostileManifests(t *testing.T) {
	srv := s3test.Shared(t)
	bucket := srv.NewBucket(t)
	payload := []byte("if you can read this, restore wrote it\n")
	hash := blake3Hex(payload)
	parent := t.TempDir()
	outside := filepath.Join(parent, "outside")
	if err := os.Mkdir(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	absTarget := filepath.Join(parent, "abs-pwned")

	type entry struct{ path, key string }
	cases := []struct {
		name   string
		files  []entry
		links  []manifest.Symlink
		mod    func(m *manifest.Manifest)
		setup  func(t *testing.T, dst string) // prepares the target directory
		expect []string                       // texts the error line must hold
	}{
		{name: "absolute path", files: []entry{{path: absTarget}}, expect: []string{"files[0].path", "is absolute"}},
		{name: "dot-dot inside the path", files: []entry{{path: "sub/../../dotdot-pwned"}}, expect: []string{"files[0].path", ".."}},
		{name: "duplicate path", files: []entry{{path: "model.pt"}, {path: "model.pt"}}, expect: []string{"files[1].path", "repeats files[0]"}},
		{name: "symlink to an absolute path", files: []entry{{path: "model.pt"}},
			links: []manifest.Symlink{{Path: "latest.pt", Target: "/etc/passwd"}}, expect: []string{"symlinks[0].target", "absolute"}},
		{name: "symlink escaping with dot-dot", files: []entry{{path: "model.pt"}},
			links: []manifest.Symlink{{Path: "sub/latest.pt", Target: "../../outside/x"}}, expect: []string{"symlinks[0].target", "outside the checkpoint"}},
		{name: "symlink chain escaping", files: []entry{{path: "r/f"}},
			links: []manifest.Symlink{{Path: "p/q/l", Target: "../../r"}, {Path: "p/q/e", Target: "l/../.."}}, expect: []string{"p/q/e", "resolves outside the target directory"}},
		{name: "file below a symlink", files: []entry{{path: "latest/x"}},
			links: []manifest.Symlink{{Path: "latest", Target: "r"}}, expect: []string{"files[0].path", "lies below symlinks[0]"}},
		{name: "through a symlink already in the target", files: []entry{{path: "sub/x"}},
			setup: func(t *testing.T, dst string) {
				if err := os.Symlink(outside, filepath.Join(dst, "sub")); err != nil {
					t.Fatal(err)
				}
			}, expect: []string{"sub/x", "resolves outside the target directory"}},
		{name: "negative size", files: []entry{{path: "model.pt"}}, mod: func(m *manifest.Manifest) { m.Files[0].Size = -1 },
			expect: []string{"files[0].size", "-1"}},
		{name: "absurd size", files: []entry{{path: "model.pt"}}, mod: func(m *manifest.Manifest) { m.Files[0].Size = 1 << 50 },
			expect: []string{"files[0].size", "1125899906842624"}},
		{name: "key outside the prefix", files: []entry{{path: "model.pt", key: "elsewhere/data/model.pt"}},
			expect: []string{"files[0].key", "elsewhere/data/model.pt"}},
		{name: "key escaping the prefix", files: []entry{{path: "model.pt", key: "%s/data/../../elsewhere/model.pt"}},
			expect: []string{"files[0].key"}},
		{name: "format version 4", files: []entry{{path: "model.pt"}}, mod: func(m *manifest.Manifest) { m.Format = "4.0" },
			expect: []string{"field format", `"4.0" not supported`}},
		{name: "format 2 without shards", files: []entry{{path: "model.pt"}}, mod: func(m *manifest.Manifest) { m.Format = "2.0" },
			expect: []string{"field shards", "needs at least one"}},
		{name: "no format version", files: []entry{{path: "model.pt"}}, mod: func(m *manifest.Manifest) { m.Format = "" },
			expect: []string{"field format", "missing"}},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			prefix := "run" + string(rune('a'+i))
			const step = 7
			m := &manifest.Manifest{Format: manifest.FormatVersion, Step: step, Created: time.Now().UTC(), Symlinks: c.links}
			for _, e := range c.files {
				key := e.key
				if key == "" {
					key = manifest.DataPrefix(prefix) + "000000000007/attempt/" + strings.TrimPrefix(e.path, "/")
				} else if strings.Contains(key, "%s") {
					key = strings.ReplaceAll(key, "%s", prefix)
				}
				putRaw(t, srv, bucket, key, payload)
				m.Files = append(m.Files, manifest.File{Path: e.path, Size: int64(len(payload)), BLAKE3: hash, Key: key})
			}
			if c.mod != nil {
				c.mod(m)
			}
			raw, err := json.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			putRaw(t, srv, bucket, manifest.ManifestKey(prefix, step), raw)

			dst := filepath.Join(parent, "target-"+prefix)
			writeFile(t, filepath.Join(dst, "keep.txt"), []byte("mine"))
			if c.setup != nil {
				c.setup(t, dst)
			}
			before := listTree(t, dst)
			r := ferry(t, srv, "restore", "--from", "s3://"+bucket+"/"+prefix, "--to", dst, "--step", "7").must(t, 1)
			line := ferryErrorLine(t, r.stderr)
			if !containsAll(line, c.expect...) {
				t.Errorf("error line %q does not hold %q", line, c.expect)
			}
			t.Logf("%s", line)
			if after := listTree(t, dst); !slices.Equal(before, after) {
				t.Errorf("target changed from %v to %v", before, after)
			}
			if got := listTree(t, outside); len(got) != 0 {
				t.Errorf("written outside the target: %v", got)
			}
			for _, p := range []string{absTarget, filepath.Join(parent, "dotdot-pwned")} {
				if _, err := os.Lstat(p); !os.IsNotExist(err) {
					t.Errorf("%s exists after the restore", p)
				}
			}
		})
	}
}

// TestCLIRestoreNoSpace restores a 12 MiB file into an 8 MiB tmpfs holding
// an older version of it: a clear "no space" error, the old file and its
// neighbour untouched, no temporary file left.
func TestCLIRestoreNoSpace(t *testing.T) {
	srv := s3test.Shared(t)
	mnt := filepath.Join(t.TempDir(), "small")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", mnt, "tmpfs", 0, "size=8m"); err != nil {
		t.Skipf("cannot mount a small tmpfs here (%v): needs root or CAP_SYS_ADMIN", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(mnt, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", mnt, err)
		}
	})
	url := "s3://" + srv.NewBucket(t) + "/run"
	src := t.TempDir()
	writeFile(t, filepath.Join(src, "model.pt"), randomBytes(12*mib, 21))
	ferry(t, srv, "push", "--to", url, "--step", "3", "--part-size", "5MiB", src).must(t, 0)

	old, keep := randomBytes(100<<10, 22), []byte("keep me\n")
	writeFile(t, filepath.Join(mnt, "model.pt"), old)
	writeFile(t, filepath.Join(mnt, "keep.txt"), keep)
	r := ferry(t, srv, "restore", "--from", url, "--to", mnt).must(t, 1)
	line := ferryErrorLine(t, r.stderr)
	t.Logf("%s", line)
	if !containsAll(line, "model.pt", "no space left on device") {
		t.Errorf("error line %q does not say which file and that the disk is full", line)
	}
	if got := listTree(t, mnt); !slices.Equal(got, []string{"keep.txt", "model.pt"}) {
		t.Errorf("target holds %v after the failure, want only keep.txt and model.pt", got)
	}
	for name, want := range map[string][]byte{"model.pt": old, "keep.txt": keep} {
		if got, _ := os.ReadFile(filepath.Join(mnt, name)); !bytes.Equal(got, want) {
			t.Errorf("%s changed", name)
		}
	}
	var fs syscall.Statfs_t
	if err := syscall.Statfs(mnt, &fs); err == nil && fs.Bfree*uint64(fs.Bsize) < 7*mib {
		t.Errorf("only %d bytes free after the failed restore: a temporary file still holds space", fs.Bfree*uint64(fs.Bsize))
	}
}

// TestAgentWatchHazards: links out of the watched directory are never
// followed for upload, files that appear and vanish at once commit nothing
// and crash nothing, and the agent keeps working afterwards.
func TestAgentWatchHazards(t *testing.T) {
	srv := s3test.Shared(t)
	bucket := srv.NewBucket(t)
	st := srv.Store(t, bucket)
	watch, outside := t.TempDir(), t.TempDir()
	marker := []byte("FERRY-OUTSIDE-SECRET;")
	secret := bytes.Repeat(marker, 3001) // 63,021 bytes: a size no checkpoint file here has
	writeFile(t, filepath.Join(outside, "secret.pt"), secret)
	writeFile(t, filepath.Join(outside, "sub", "secret.pt"), secret)
	link := func(target, name string) {
		t.Helper()
		if err := os.Symlink(target, filepath.Join(watch, name)); err != nil {
			t.Fatal(err)
		}
	}
	// Step 5: rank 0 a real file, rank 1 a link out of the directory named
	// like a checkpoint file.
	writeFile(t, filepath.Join(watch, "ep0-ba5-rank0.pt"), randomBytes(200<<10, 5))
	link(filepath.Join(outside, "secret.pt"), "ep0-ba5-rank1.pt")
	// Step 6: a sharded folder with a shard, a folder and a relative path
	// all linked out of the directory.
	writeFile(t, filepath.Join(watch, "ep0-ba6", "__0_0.distcp"), randomBytes(300<<10, 6))
	link(filepath.Join(outside, "secret.pt"), "ep0-ba6/__1_0.distcp")
	link(filepath.Join(outside, "sub"), "ep0-ba6/linkdir")
	link("../../"+filepath.Base(outside)+"/secret.pt", "ep0-ba6/relative.pt")
	writeFile(t, filepath.Join(watch, "ep0-ba6", ".metadata"), []byte("md"))

	proc := startAgentProcess(t, srv.Env(), "--watch", watch, "--to", "s3://"+bucket+"/run", "--state-dir", t.TempDir(),
		"--layout", "composer", "--settle", "300ms", "--metrics-addr", "off")
	waitFor(t, "steps 5 and 6 committed", time.Minute, func() bool { return len(committed(t, st, "run")) == 2 })

	// Files and folders that exist for a few milliseconds, for a second.
	deadline := time.Now().Add(time.Second)
	for i := 0; time.Now().Before(deadline); i++ {
		f := filepath.Join(watch, "ep0-ba"+strconv.Itoa(1000+i)+"-rank0.pt")
		d := filepath.Join(watch, "ep0-ba"+strconv.Itoa(5000+i))
		writeFile(t, f, randomBytes(64<<10, byte(i)))
		writeFile(t, filepath.Join(d, "__0_0.distcp"), []byte("shard"))
		writeFile(t, filepath.Join(d, ".metadata"), []byte("md"))
		time.Sleep(10 * time.Millisecond)
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
		if err := os.RemoveAll(d); err != nil {
			t.Fatal(err)
		}
	}
	// The agent still works: a step written now is committed, alone.
	writeFile(t, filepath.Join(watch, "ep0-ba7-rank0.pt"), randomBytes(100<<10, 7))
	waitFor(t, "step 7 committed", time.Minute, func() bool { return slices.Contains(committed(t, st, "run"), 7) })
	time.Sleep(time.Second) // a flickering step reported late would show now
	if got := committed(t, st, "run"); !slices.Equal(got, []int64{7, 6, 5}) {
		t.Errorf("committed %v, want [7 6 5]: a vanished file was committed", got)
	}
	if proc.ProcessState != nil {
		t.Fatalf("agent exited: %v", proc.ProcessState)
	}

	for _, n := range []int64{5, 6, 7} {
		m, err := remote.Get(context.Background(), st, "run", n)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range m.Files {
			if f.Size == int64(len(secret)) || f.BLAKE3 == blake3Hex(secret) || strings.Contains(f.Path, "__1_0") ||
				strings.Contains(f.Path, "linkdir") || strings.Contains(f.Path, "relative") || f.Path == "ep0-ba5-rank1.pt" {
				t.Errorf("step %d records %s (%d bytes): a link out of the watched directory was followed", n, f.Path, f.Size)
			}
		}
		for _, l := range m.Symlinks {
			if !strings.HasPrefix(l.Path, "latest-rank") {
				t.Errorf("step %d records link %s -> %s", n, l.Path, l.Target)
			}
		}
	}
	// Nothing in the bucket holds the outside file's bytes.
	err := st.List(context.Background(), "", "", 0, func(o store.ObjectInfo) error {
		rc, err := st.Get(context.Background(), o.Key, 0, -1)
		if err != nil {
			return err
		}
		defer rc.Close()
		data, err := io.ReadAll(rc)
		if bytes.Contains(data, marker) {
			t.Errorf("object %s holds the outside file's bytes", o.Key)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	logs := proc.logs.String()
	if strings.Contains(logs, "panic") {
		t.Errorf("the agent panicked:\n%s", logs)
	}
	if !strings.Contains(logs, "outside the watched directory") {
		t.Errorf("no warning about the links out of the directory in:\n%s", logs)
	}
}

// unprivilegedAgent prepares to run the agent as an unprivileged user: as
// nobody when the test runs as root (root reads files whatever their mode),
// else as the current user. It returns a directory that user can use and
// the SysProcAttr to run as them.
func unprivilegedAgent(t *testing.T) (string, *syscall.SysProcAttr, string) {
	t.Helper()
	base, err := os.MkdirTemp("", "ferry-hostile-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if os.Geteuid() != 0 {
		return base, nil, os.Args[0]
	}
	const nobody = 65534
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	// A copy of the test binary nobody can run: go test's own is in a
	// private build directory.
	bin := filepath.Join(base, "ferry.test")
	data, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	attr := &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	probe := exec.Command(bin, "--version")
	probe.Env = []string{"FERRY_CLI_MAIN=1"}
	probe.SysProcAttr = attr
	if out, err := probe.CombinedOutput(); err != nil {
		t.Skipf("cannot run the test binary as nobody from %s (%v: %s)", base, err, out)
	}
	return base, attr, bin
}

// TestAgentPermissionDenied: a checkpoint file the agent cannot read makes
// that step fail, with the reason in ferry status; the agent goes on with
// the next step.
func TestAgentPermissionDenied(t *testing.T) {
	srv := s3test.Shared(t)
	bucket := srv.NewBucket(t)
	st := srv.Store(t, bucket)
	base, attr, bin := unprivilegedAgent(t)
	watch, state := filepath.Join(base, "watch"), filepath.Join(base, "state")
	if err := os.MkdirAll(state, 0o700); err != nil {
		t.Fatal(err)
	}
	if attr != nil {
		if err := os.Chown(state, int(attr.Credential.Uid), int(attr.Credential.Gid)); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(watch, "ep0-ba5", "__0_0.distcp"), randomBytes(100<<10, 1))
	denied := filepath.Join(watch, "ep0-ba5", "__1_0.distcp")
	writeFile(t, denied, randomBytes(100<<10, 2))
	if err := os.Chmod(denied, 0); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(watch, "ep0-ba5", ".metadata"), []byte("md"))
	for _, d := range []string{watch, filepath.Join(watch, "ep0-ba5")} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}

	cmd := exec.Command(bin, "agent", "--watch", watch, "--to", "s3://"+bucket+"/run", "--state-dir", state,
		"--layout", "composer", "--settle", "300ms", "--metrics-addr", "off")
	cmd.Env = append([]string{"FERRY_CLI_MAIN=1", "PATH=" + os.Getenv("PATH"), "HOME=" + state}, srv.Env()...)
	cmd.SysProcAttr = attr
	logs := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("agent output:\n%s", logs.String())
		}
	})

	var failed control.StepStatus
	waitFor(t, "step 5 reported failed", time.Minute, func() bool {
		r := ferry(t, nil, "status", "--json", "--state-dir", state)
		var s control.Status
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &s) != nil {
			return false
		}
		for _, ss := range s.Steps {
			if ss.Step == 5 && ss.State == control.StateFailed {
				failed = ss
				return true
			}
		}
		return false
	})
	if !containsAll(failed.Error, "step 5", "__1_0.distcp", "permission denied") {
		t.Errorf("step 5 error %q does not name the file and the reason", failed.Error)
	}
	t.Logf("status of step 5: %s", failed.Error)
	// The agent goes on: the next step is committed.
	writeFile(t, filepath.Join(watch, "ep0-ba6", "__0_0.distcp"), randomBytes(100<<10, 3))
	writeFile(t, filepath.Join(watch, "ep0-ba6", ".metadata"), []byte("md"))
	os.Chmod(filepath.Join(watch, "ep0-ba6"), 0o755)
	waitFor(t, "step 6 committed", time.Minute, func() bool { return slices.Contains(committed(t, st, "run"), 6) })
	if got := committed(t, st, "run"); !slices.Equal(got, []int64{6}) {
		t.Errorf("committed %v, want [6]", got)
	}
	select {
	case err := <-exited:
		t.Fatalf("agent exited: %v", err)
	default:
	}
	if strings.Contains(logs.String(), "panic") {
		t.Error("the agent panicked")
	}
}

// Fake credentials, recognisable in any output.
const (
	fakeKeyID  = "AKIAFERRYFAKEKEY0001"
	fakeSecret = "ferryFakeSecret/DoNotLeak123"
	fakeToken  = "FerryFakeSessionToken0001"
)

// leakPattern finds signing material whatever the credentials.
var leakPattern = regexp.MustCompile(`Signature=|Credential=|X-Amz-Security-Token|X-Amz-Signature`)

func checkNoSecrets(t *testing.T, what, out string, secrets ...string) {
	t.Helper()
	for _, s := range secrets {
		if strings.Contains(out, s) {
			t.Errorf("%s shows %q:\n%s", what, s, out)
		}
	}
	if m := leakPattern.FindString(out); m != "" {
		t.Errorf("%s shows signing material (%s):\n%s", what, m, out)
	}
}

// withEnv returns env with the variables in set replaced or added.
func withEnv(env []string, set ...string) []string {
	out := slices.Clone(env)
	for _, kv := range set {
		name, _, _ := strings.Cut(kv, "=")
		out = slices.DeleteFunc(out, func(e string) bool { return strings.HasPrefix(e, name+"=") })
		out = append(out, kv)
	}
	return out
}

func ferryEnv(t *testing.T, env []string, args ...string) result {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append([]string{"FERRY_CLI_MAIN=1", "PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), testPriority}, env...)
	return run(t, cmd)
}

// TestSecretsNeverShown runs push, list, show, restore and the agent at
// debug level, with fake credentials the server refuses and with real ones,
// and looks for the credentials in everything ferry prints or serves.
func TestSecretsNeverShown(t *testing.T) {
	srv := s3test.Shared(t)
	bucket := srv.NewBucket(t)
	url := "s3://" + bucket + "/run"
	src := t.TempDir()
	writeFile(t, filepath.Join(src, "model.pt"), randomBytes(6*mib, 9))
	ops := func(step string) [][]string {
		return [][]string{
			{"push", "--log-level", "debug", "--to", url, "--step", step, "--part-size", "5MiB", "--state-dir", t.TempDir(), src},
			{"list", "--log-level", "debug", "--from", url},
			{"show", "--log-level", "debug", "--from", url},
			{"restore", "--log-level", "debug", "--from", url, "--to", filepath.Join(t.TempDir(), "out")},
		}
	}
	secrets := []string{fakeKeyID, fakeSecret, fakeToken, srv.SecretKey}

	// Refused credentials: the error paths.
	for _, env := range [][]string{
		withEnv(srv.Env(), "AWS_ACCESS_KEY_ID="+fakeKeyID, "AWS_SECRET_ACCESS_KEY="+fakeSecret, "AWS_SESSION_TOKEN="+fakeToken),
		withEnv(srv.Env(), "AWS_SECRET_ACCESS_KEY="+fakeSecret),
		withEnv(srv.Env(), "AWS_SESSION_TOKEN="+fakeToken),
	} {
		for _, args := range ops("1") {
			r := ferryEnv(t, env, args...)
			if r.code != 1 {
				t.Errorf("ferry %s with refused credentials: exit %d, want 1\n%s", args[0], r.code, r.stderr)
			}
			checkNoSecrets(t, "ferry "+args[0]+" (refused credentials)", r.stdout+r.stderr, secrets...)
		}
		r := ferryEnv(t, env, "agent", "--log-level", "debug", "--watch", src, "--to", url, "--state-dir", t.TempDir(), "--metrics-addr", "off")
		if r.code != 1 {
			t.Errorf("agent with refused credentials: exit %d, want 1\n%s", r.code, r.stderr)
		}
		checkNoSecrets(t, "ferry agent (refused credentials)", r.stdout+r.stderr, secrets...)
	}

	// Valid credentials: the debug logs of work that succeeds.
	for _, args := range ops("1") {
		r := ferryEnv(t, srv.Env(), args...).must(t, 0)
		checkNoSecrets(t, "ferry "+args[0], r.stdout+r.stderr, secrets...)
	}

	// The agent, with a step the server refuses halfway (403 on its data)
	// so that errors reach its status and metrics.
	view, px := srv.WithProxy(t, s3proxy.Config{Logf: func(string, ...any) {}, Rules: []s3proxy.Rule{{
		KeyPrefix: manifest.DataPrefix("agent") + manifest.StepString(2) + "/",
		Action:    s3proxy.Status(http.StatusForbidden, "AccessDenied"),
	}}})
	watch, state := t.TempDir(), t.TempDir()
	proc := startAgentProcess(t, view.Env(), "--log-level", "debug", "--watch", watch, "--to", "s3://"+bucket+"/agent",
		"--state-dir", state, "--layout", "composer", "--settle", "300ms", "--metrics-addr", "127.0.0.1:0", "--drain-timeout", "4s")
	sim := trainsim.Options{Dir: watch, Ranks: 1, FileSize: 1 << 20, Seed: 3}
	for _, s := range []int64{1, 2} {
		if err := trainsim.WriteStep(context.Background(), sim, s); err != nil {
			t.Fatal(err)
		}
	}
	var status string
	waitFor(t, "step 1 committed and step 2 failed", time.Minute, func() bool {
		r := ferry(t, nil, "status", "--json", "--state-dir", state)
		var s control.Status
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &s) != nil {
			return false
		}
		status = r.stdout
		return s.LastCommitted == 1 && s.LastError != ""
	})
	addr := regexp.MustCompile(`metrics listening.*"addr": "([0-9.:]+)"`).FindStringSubmatch(proc.logs.String())
	if addr == nil {
		t.Fatalf("no metrics address in the agent's log:\n%s", proc.logs.String())
	}
	if host, _, _ := net.SplitHostPort(addr[1]); !net.ParseIP(host).IsLoopback() {
		t.Errorf("metrics listen on %s", addr[1])
	}
	for _, path := range []string{"/metrics", "/healthz"} {
		resp, err := http.Get("http://" + addr[1] + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		checkNoSecrets(t, "agent "+path, string(body), secrets...)
	}
	checkNoSecrets(t, "ferry status --json", status, secrets...)
	checkNoSecrets(t, "ferry status", ferry(t, nil, "status", "--state-dir", state).must(t, 0).stdout, secrets...)
	// SIGTERM: the drain retries step 2, which the server refuses at
	// once, until the drain timeout; it must not send it back to back.
	px.Reset()
	if err := proc.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- proc.Wait() }()
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		t.Fatal("agent still draining 30 s after SIGTERM with --drain-timeout 4s")
	}
	if n := px.Counts()[s3proxy.OpPutObject]; n > 6 {
		t.Errorf("%d PUTs of the refused step during a 4 s drain: retried back to back", n)
	} else {
		t.Logf("%d PUTs of the refused step during the 4 s drain", n)
	}
	checkNoSecrets(t, "agent log", proc.logs.String(), secrets...)
	if !strings.Contains(proc.logs.String(), "DEBUG") {
		t.Error("the agent logged nothing at debug level: the check saw little")
	}
}

// TestAgentListensLocallyByDefault: the metrics endpoint defaults to a
// loopback address, and the control socket is a Unix socket only its owner
// can open.
func TestAgentListensLocallyByDefault(t *testing.T) {
	var def string
	for _, f := range newAgentCommand().Flags {
		if f.Names()[0] == "metrics-addr" {
			def = f.(interface{ GetValue() string }).GetValue()
		}
	}
	host, _, err := net.SplitHostPort(def)
	if err != nil || !net.ParseIP(host).IsLoopback() {
		t.Errorf("--metrics-addr defaults to %q, want a loopback address", def)
	}
	if host, _, _ := net.SplitHostPort(control.DefaultMetricsAddr); !net.ParseIP(host).IsLoopback() {
		t.Errorf("control.DefaultMetricsAddr is %q, want a loopback address", control.DefaultMetricsAddr)
	}

	srv := s3test.Shared(t)
	state, watch, to := filepath.Join(t.TempDir(), "state"), t.TempDir(), "s3://"+srv.NewBucket(t)+"/run"
	startAgentProcess(t, srv.Env(), "--watch", watch, "--to", to, "--state-dir", state, "--metrics-addr", "off")
	sock := agentSocket(t, state, watch, to)
	waitFor(t, "the control socket", 30*time.Second, func() bool { _, err := os.Stat(sock); return err == nil })
	fi, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Errorf("control socket %s: mode %v, want a socket with 0600", sock, fi.Mode())
	}
	di, err := os.Stat(filepath.Dir(sock))
	if err != nil || di.Mode().Perm()&0o077 != 0 {
		t.Errorf("control socket directory: %v, %v: want no access for group and others", di.Mode(), err)
	}
}

// TestCLIServerErrors: a refused secret, a missing bucket, a wrong region
// and expired credentials each end push, list and restore with exit 1 and
// one line saying what to fix.
func TestCLIServerErrors(t *testing.T) {
	srv := s3test.Shared(t)
	bucket := srv.NewBucket(t)
	src := t.TempDir()
	writeFile(t, filepath.Join(src, "model.pt"), randomBytes(1000, 4))
	expired400, _ := srv.WithProxy(t, s3proxy.Config{Rules: []s3proxy.Rule{{Action: s3proxy.Status(http.StatusBadRequest, "ExpiredToken")}}})
	expired403, _ := srv.WithProxy(t, s3proxy.Config{Rules: []s3proxy.Rule{{Action: s3proxy.Status(http.StatusForbidden, "ExpiredToken")}}})
	cases := []struct {
		name   string
		env    []string
		bucket string
		expect []string
	}{
		{"wrong secret", withEnv(srv.Env(), "AWS_SECRET_ACCESS_KEY=not-the-secret"), bucket,
			[]string{"access denied (SignatureDoesNotMatch)", "check the credentials", `bucket "` + bucket + `"`}},
		{"missing bucket", srv.Env(), "ferry-no-such-bucket", []string{`bucket "ferry-no-such-bucket" does not exist at ` + srv.Endpoint, "create it"}},
		{"wrong region", withEnv(srv.Env(), "AWS_REGION=eu-west-1"), bucket, []string{"wrong region", "set --region or AWS_REGION"}},
		{"expired credentials (400)", expired400.Env(), bucket, []string{"credentials have expired (ExpiredToken)", "renew them"}},
		{"expired credentials (403)", expired403.Env(), bucket, []string{"credentials have expired (ExpiredToken)", "renew them"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.name == "wrong region" && srv.Kind() == s3test.SeaweedFS {
				t.Skip("SeaweedFS accepts a signature for any region: nothing to refuse (docs/compatibility.md)")
			}
			url := "s3://" + c.bucket + "/run"
			for _, args := range [][]string{
				{"push", "--quiet", "--to", url, "--step", "1", "--state-dir", t.TempDir(), src},
				{"list", "--from", url},
				{"restore", "--from", url, "--to", filepath.Join(t.TempDir(), "out")},
			} {
				r := ferryEnv(t, c.env, args...)
				if r.code != 1 {
					t.Errorf("ferry %s: exit %d, want 1\n%s", args[0], r.code, r.stderr)
					continue
				}
				line := ferryErrorLine(t, r.stderr)
				if !containsAll(line, c.expect...) {
					t.Errorf("ferry %s: %q does not say %q", args[0], line, c.expect)
				}
				t.Logf("%s: %s", args[0], line)
			}
		})
	}
}
