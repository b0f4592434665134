package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/internal/s3test"
)

// The shell blocks of the README and the docs are run by TestDocRecipes, so
// that no recipe drifts from what ferry does. The rules (CONTRIBUTING.md):
//
//   - every fenced block names its kind: ```sh, ```text, ```yaml, ...;
//   - a ```sh block runs, as written, except for the names below; one that
//     cannot run here (a cluster, a real R2 account, a command with
//     placeholders) says so: ```sh no-test;
//   - a document's ```sh blocks run in order as one bash script, so a block
//     can use what an earlier one set up.
//
// What the test substitutes: the bucket my-bucket (a new bucket on the
// test's versitygw, whose endpoint and keys are in the environment, as
// after README's "Connecting to a store"), /nvme/ (a folder of the test),
// 127.0.0.1:7070 (a free port on loopback). ferry, ferry-trainsim's place
// on PATH and a stand-in for torchrun (test/docs-bin, below) are on PATH.

// docBlock is one fenced block of a document.
type docBlock struct {
	file string
	line int
	info string // the fence's info string: "sh", "sh no-test", "text"
	body string
}

// runnable reports whether the block is a shell block the test runs.
func (b docBlock) runnable() bool {
	f := strings.Fields(b.info)
	return len(f) > 0 && f[0] == "sh" && !strings.Contains(b.info, "no-test")
}

// docFiles are the documents whose blocks are checked.
func docFiles(t *testing.T) []string {
	t.Helper()
	root := repoRoot(t)
	var files []string
	for _, pattern := range []string{"*.md", "docs/*.md", "docs/*/*.md", "deploy/*/README.md", "examples/*/README.md"} {
		m, err := filepath.Glob(filepath.Join(root, pattern))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	sort.Strings(files)
	return files
}

// readDocBlocks returns the fenced blocks of a Markdown file.
func readDocBlocks(t *testing.T, path string) []docBlock {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var blocks []docBlock
	var cur *docBlock
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case cur == nil && strings.HasPrefix(trimmed, "```"):
			cur = &docBlock{file: path, line: n, info: strings.TrimSpace(strings.TrimPrefix(trimmed, "```"))}
		case cur != nil && trimmed == "```":
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			cur.body += line + "\n"
		}
	}
	if cur != nil {
		t.Errorf("%s:%d: a fenced block is not closed", path, cur.line)
	}
	return blocks
}

// Every fenced block says what it is, so that no shell block escapes the
// recipe test by having no tag.
func TestDocBlocksTagged(t *testing.T) {
	runnable := 0
	for _, f := range docFiles(t) {
		for _, b := range readDocBlocks(t, f) {
			if b.info == "" {
				t.Errorf("%s:%d: a fenced block without a kind: tag it ```sh (run by TestDocRecipes), ```sh no-test (cannot run here), ```text, ...", rel(t, f), b.line)
			}
			if b.runnable() {
				runnable++
			}
		}
	}
	if runnable == 0 {
		t.Error("no runnable ```sh block found in the docs")
	}
}

func rel(t *testing.T, path string) string {
	r, err := filepath.Rel(repoRoot(t), path)
	if err != nil {
		return path
	}
	return r
}

// TestDocRecipes runs each document's ```sh blocks, in order, as one bash
// script against versitygw. Each document starts in a new folder with a
// new bucket; a failing command fails the test with the script's output.
func TestDocRecipes(t *testing.T) {
	srv := s3test.Shared(t)
	bin := docsBin(t)
	for _, f := range docFiles(t) {
		var scripts []string
		var script strings.Builder
		for _, b := range readDocBlocks(t, f) {
			if !b.runnable() {
				continue
			}
			block := fmt.Sprintf("# %s:%d\n%s\n", rel(t, f), b.line, b.body)
			script.WriteString(block)
			if docsInFreshShells[rel(t, f)] {
				scripts = append(scripts, block)
			}
		}
		if script.Len() == 0 {
			continue
		}
		if len(scripts) == 0 {
			scripts = []string{script.String()}
		}
		t.Run(rel(t, f), func(t *testing.T) {
			out, err := runDocScripts(t, srv, bin, scripts)
			if err != nil {
				t.Fatalf("%v\n--- script\n%s\n--- output\n%s", err, script.String(), out)
			}
			t.Logf("output:\n%s", out)
			if docsWithRealOutput[rel(t, f)] {
				checkShownOutput(t, rel(t, f), readDocBlocks(t, f), out)
			}
		})
	}
}

// runDocScript runs script with bash in a new folder, with the
// substitutions TestDocRecipes describes, and returns its output. It kills
// whatever the script left running. The script runs under set -e, as a
// reader expects a recipe to stop at its first failure (without it, an
// agent that could not start left the rest of getting-started running and
// the test green). The folder is short: t.TempDir's name made the agent's
// socket path longer than a unix socket allows, and the agent exited.
// docsInFreshShells are the documents whose ```sh blocks each run in a
// new shell, as a reader may paste them into different terminals: they
// share only files (getting-started keeps its settings in an env file).
var docsInFreshShells = map[string]bool{"docs/getting-started.md": true}

// runDocScripts runs scripts one after another, each in a new bash, in
// one folder and with one substitution (runDocScript), and returns their
// output. It kills whatever any of them left running once all are done.
func runDocScripts(t *testing.T, srv *s3test.Server, bin string, scripts []string) (string, error) {
	t.Helper()
	if len(scripts) == 1 {
		return runDocScript(t, srv, bin, srv.Env(), scripts[0])
	}
	// Nothing but what the blocks write down carries from one to the
	// next: not even the test server's settings.
	return runDocScript(t, srv, bin, nil, scripts...)
}

func runDocScript(t *testing.T, srv *s3test.Server, bin string, env []string, scripts ...string) (string, error) {
	t.Helper()
	root, err := os.MkdirTemp("", "ferry-doc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(root) })
	work := filepath.Join(root, "work")
	if err := os.MkdirAll(work, 0o755); err != nil {
		t.Fatal(err)
	}
	subst := strings.NewReplacer("my-bucket", srv.NewBucket(t), "/nvme/", root+"/nvme/", "127.0.0.1:7070", freeAddr(t))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out bytes.Buffer
	var groups []int
	defer func() {
		for _, g := range groups {
			_ = syscall.Kill(-g, syscall.SIGKILL) // an agent or a server left in the background
		}
	}()
	for _, script := range scripts {
		cmd := exec.CommandContext(ctx, "bash", "-e", "-c", subst.Replace(script))
		cmd.Dir = work
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
		cmd.Env = append([]string{"PATH=" + bin + ":" + os.Getenv("PATH"), "HOME=" + filepath.Join(root, "home"), testPriority,
			"FERRY_DOCS_TEST=1"}, env...)
		cmd.Stdout, cmd.Stderr = &out, &out
		// A script that exits with a server still in the background (one
		// that started it, or a failed command under set -e) returns,
		// rather than wait for the background process's pipe.
		cmd.WaitDelay = 5 * time.Second
		err := cmd.Run()
		if cmd.Process != nil {
			groups = append(groups, cmd.Process.Pid)
		}
		if err != nil && !errors.Is(err, exec.ErrWaitDelay) {
			return out.String(), err
		}
	}
	return out.String(), nil
}

// freeAddr is a loopback address nobody listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// docsBin is a folder for PATH holding ferry (this test binary acting as
// ferry), versitygw (the tests' server binary) and torchrun, a stand-in
// trainer: it restores nothing itself, says which step it resumes from
// (the newest step-N folder in --resume DIR), and writes the next step
// there as PyTorch DCP does: shards, then .metadata last.
func docsBin(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	scripts := map[string]string{
		"ferry": "#!/bin/sh\nFERRY_CLI_MAIN=1 exec " + exe + " \"$@\"\n",
		"torchrun": `#!/bin/bash
set -euo pipefail
dir=""
while [ $# -gt 0 ]; do case "$1" in --resume) dir="$2"; shift 2;; *) shift;; esac; done
[ -n "$dir" ] || { echo "torchrun stand-in: --resume DIR missing" >&2; exit 2; }
last=$(ls "$dir" 2>/dev/null | sed -n 's/^step-\([0-9]*\)$/\1/p' | sort -n | tail -1)
echo "train: resuming from step ${last:-none}"
next=$(( ${last:-0} + 100 ))
mkdir -p "$dir/step-$next"
head -c 3000000 /dev/urandom > "$dir/step-$next/__0_0.distcp"
head -c 3000000 /dev/urandom > "$dir/step-$next/__1_0.distcp"
echo "step $next" > "$dir/step-$next/.metadata"
echo "train: saved step $next"
`,
	}
	gw := os.Getenv("FERRY_VERSITYGW")
	if gw == "" {
		gw = filepath.Join(repoRoot(t), "tools", "bin", "versitygw")
	}
	scripts["versitygw"] = "#!/bin/sh\nexec " + gw + " \"$@\"\n"
	for name, body := range scripts {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

var (
	mdHeading = regexp.MustCompile(`(?m)^#+ (.*)$`)
	mdLink    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	mdFence   = regexp.MustCompile("(?s)```.*?```")
	notSlug   = regexp.MustCompile(`[^\w\- ]`)
)

// Every relative link of the docs names a file that exists and, with
// #anchor, a heading in it (GitHub's slugs): pages moved or renamed leave
// no dead link behind.
func TestDocLinks(t *testing.T) {
	slug := func(h string) string {
		return strings.ReplaceAll(notSlug.ReplaceAllString(strings.ToLower(strings.TrimSpace(h)), ""), " ", "-")
	}
	text := map[string]string{}
	for _, f := range docFiles(t) {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		text[filepath.Clean(f)] = mdFence.ReplaceAllString(string(data), "")
	}
	anchors := func(path string) map[string]bool {
		body, ok := text[path]
		if !ok {
			data, err := os.ReadFile(path)
			if err != nil {
				return nil
			}
			body = mdFence.ReplaceAllString(string(data), "")
		}
		out := map[string]bool{}
		for _, m := range mdHeading.FindAllStringSubmatch(body, -1) {
			out[slug(m[1])] = true
		}
		return out
	}
	for f, body := range text {
		for _, m := range mdLink.FindAllStringSubmatch(body, -1) {
			link := m[1]
			if strings.Contains(link, "://") || strings.HasPrefix(link, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(link, "#")
			target := f
			if path != "" {
				target = filepath.Clean(filepath.Join(filepath.Dir(f), path))
			}
			if _, err := os.Stat(target); err != nil {
				t.Errorf("%s: link %s: %v", rel(t, f), link, err)
				continue
			}
			if anchor != "" && strings.HasSuffix(target, ".md") && !anchors(target)[anchor] {
				t.Errorf("%s: link %s: no heading #%s in %s", rel(t, f), link, anchor, rel(t, target))
			}
		}
	}
}
