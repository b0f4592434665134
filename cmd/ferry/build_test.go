package main

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// repoRoot is the repository's top folder (tests run in cmd/ferry).
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// `make build` stamps the version and the commit (Go's own VCS stamp is
// off under GOFLAGS=-buildvcs=false) and makes the static binary that
// `make release` makes, whichever target a user copies onto a node.
func TestMakeBuildStampsCommit(t *testing.T) {
	if testing.Short() {
		t.Skip("builds ferry with make")
	}
	for _, tool := range []string{"make", "git", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not found", tool)
		}
	}
	root := repoRoot(t)
	head, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("not a git checkout: %v", err)
	}
	bin := t.TempDir()
	cmd := exec.Command("make", "-C", root, "build", "BIN="+bin, "VERSION=v0.0.0-test")
	cmd.Env = append(os.Environ(), "GOFLAGS=-buildvcs=false")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make build: %v\n%s", err, out)
	}
	out, err := exec.Command(filepath.Join(bin, "ferry"), "version").Output()
	if err != nil {
		t.Fatalf("ferry version: %v", err)
	}
	want := "ferry v0.0.0-test commit " + strings.TrimSpace(string(head)) + " "
	if !strings.HasPrefix(string(out), want) {
		t.Errorf("bin/ferry version printed %q, want it to start with %q", out, want)
	}
	info, err := exec.Command("go", "version", "-m", filepath.Join(bin, "ferry")).Output()
	if err != nil {
		t.Fatalf("go version -m: %v", err)
	}
	for _, setting := range []string{"CGO_ENABLED=0", "-trimpath=true"} {
		if !bytes.Contains(info, []byte(setting)) {
			t.Errorf("bin/ferry was not built with %s, as make release builds:\n%s", setting, info)
		}
	}
}

// NOTICE carries the NOTICE of every library in the binary that has one
// (Apache-2.0 section 4(d)): a new dependency with a NOTICE fails here.
func TestNoticeCoversDependencies(t *testing.T) {
	if testing.Short() {
		t.Skip("lists the binary's modules with go list")
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("go not found")
	}
	notice, err := os.ReadFile(filepath.Join(repoRoot(t), "NOTICE"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("go", "list", "-deps", "-f", "{{with .Module}}{{.Path}} {{.Dir}}{{end}}", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	seen := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		path, dir, ok := strings.Cut(sc.Text(), " ")
		if !ok || seen[path] || path == "github.com/ferrylabs/ferry" {
			continue
		}
		seen[path] = true
		files, _ := filepath.Glob(filepath.Join(dir, "NOTICE*"))
		if len(files) > 0 && !bytes.Contains(notice, []byte("\n"+path+"\n")) {
			t.Errorf("%s has %s; add it to NOTICE", path, filepath.Base(files[0]))
		}
	}
	if len(seen) < 10 {
		t.Fatalf("go list found only %d modules: %s", len(seen), out)
	}
}
