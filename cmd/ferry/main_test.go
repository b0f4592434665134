package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/internal/s3test"
)

// TestMain lets the test binary act as the ferry binary: with
// FERRY_CLI_MAIN=1 it runs Main on its arguments and exits, so CLI tests
// run real processes (exit codes, signals, environment) without a separate
// build step.
func TestMain(m *testing.M) {
	if os.Getenv("FERRY_CLI_MAIN") == "1" {
		fakeDNSFromEnv()
		os.Exit(runWithSignals(append([]string{"ferry"}, os.Args[1:]...)))
	}
	s3test.Main(m)
}

// testPriority keeps test agents at normal priority (a test's env may set
// FERRY_PRIORITY again, later entries win): a SCHED_IDLE agent on a CI
// machine busy with other test binaries could wait seconds for a core.
// TestAgentLowPriority runs one at the default.
const testPriority = "FERRY_PRIORITY=normal"

// result is what one ferry run did.
type result struct {
	code           int
	stdout, stderr string
}

// ferryCmd returns a command running ferry with the server's environment.
func ferryCmd(t *testing.T, srv *s3test.Server, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	env := []string{"FERRY_CLI_MAIN=1", "PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), testPriority}
	if srv != nil {
		env = append(env, srv.Env()...)
	}
	cmd.Env = env
	return cmd
}

// ferry runs ferry to completion.
func ferry(t *testing.T, srv *s3test.Server, args ...string) result {
	t.Helper()
	return run(t, ferryCmd(t, srv, args...))
}

func run(t *testing.T, cmd *exec.Cmd) result {
	t.Helper()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run ferry: %v", err)
	}
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}

func (r result) must(t *testing.T, code int) result {
	t.Helper()
	if r.code != code {
		t.Fatalf("exit code %d, want %d\nstdout: %s\nstderr: %s", r.code, code, r.stdout, r.stderr)
	}
	return r
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func randomBytes(n int, seed byte) []byte {
	b := make([]byte, n)
	x := uint32(seed)*2654435761 + 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
	return b
}

// sameTree fails t unless every regular file under want exists under got
// with the same bytes.
func sameTree(t *testing.T, want, got string) {
	t.Helper()
	err := filepath.Walk(want, func(p string, fi os.FileInfo, err error) error {
		if err != nil || !fi.Mode().IsRegular() {
			return err
		}
		rel, _ := filepath.Rel(want, p)
		a, _ := os.ReadFile(p)
		b, err := os.ReadFile(filepath.Join(got, rel))
		if err != nil {
			t.Errorf("restored tree lacks %s: %v", rel, err)
			return nil
		}
		if !bytes.Equal(a, b) {
			t.Errorf("%s differs after restore", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func decodeJSON(t *testing.T, s string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(s), v); err != nil {
		t.Fatalf("decode %q: %v", s, err)
	}
}

// waitFor polls cond every 50ms until it holds or the deadline passes.
func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
