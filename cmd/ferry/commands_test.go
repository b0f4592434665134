package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// commandConstructors builds each command of ferry by name, for the tests
// that check every command's help and docs (TestEveryCommandChecked keeps
// it complete).
var commandConstructors = map[string]func() *cli.Command{
	"push": newPushCommand, "restore": newRestoreCommand, "follow": newFollowCommand, "list": newListCommand, "show": newShowCommand,
	"verify": newVerifyCommand, "copy": newCopyCommand, "status": newStatusCommand, "flush": newFlushCommand,
	"commit": newCommitCommand, "prune": newPruneCommand, "agent": newAgentCommand, "doctor": newDoctorCommand,
	"version": newVersionCommand,
}

// allCommands are ferry's commands, built as the binary builds them, in
// the order of commandNames.
func allCommands(t *testing.T) []*cli.Command {
	t.Helper()
	var cmds []*cli.Command
	for _, name := range commandNames(t) {
		c, ok := commandConstructors[name]
		if !ok {
			t.Fatalf("ferry --help lists %q, which commandConstructors lacks: add it", name)
		}
		cmds = append(cmds, c())
	}
	return cmds
}

// commandNames are the commands `ferry --help` lists.
func commandNames(t *testing.T) []string {
	t.Helper()
	var out, errb bytes.Buffer
	if code := Main(context.Background(), []string{"ferry", "--help"}, &out, &errb); code != 0 {
		t.Fatalf("ferry --help: exit %d: %s", code, errb.String())
	}
	_, list, ok := strings.Cut(out.String(), "COMMANDS:\n")
	if !ok {
		t.Fatalf("ferry --help has no COMMANDS section:\n%s", out.String())
	}
	var names []string
	for _, line := range strings.Split(list, "\n") {
		if !strings.HasPrefix(line, "   ") || strings.HasPrefix(line, "    ") {
			break
		}
		names = append(names, strings.Fields(line)[0])
	}
	if len(names) == 0 {
		t.Fatalf("no command found in ferry --help:\n%s", out.String())
	}
	return names
}

// Every command the binary has is in the command reference, the golden
// help files and the docs' flag check: a new command (ferry commit was
// one) is not left out of them.
func TestEveryCommandChecked(t *testing.T) {
	inRef := map[string]bool{}
	for _, c := range referenceCommands {
		inRef[c] = true
	}
	inGolden := map[string]bool{}
	for _, c := range goldenCommands {
		inGolden[c] = true
	}
	for _, c := range allCommands(t) {
		if !inRef[c.Name] {
			t.Errorf("ferry %s is not in referenceCommands: docs/reference.md does not describe it", c.Name)
		}
		if !inGolden[c.Name] {
			t.Errorf("ferry %s is not in goldenCommands: its --help has no golden file", c.Name)
		}
		if !docCommand.MatchString("ferry " + c.Name + " --help") {
			t.Errorf("ferry %s: docCommand does not match it, so the flags the docs give it are not checked", c.Name)
		}
	}
}

var (
	helpExitCode = regexp.MustCompile(`(?m)^     (\d)  `)
	docExitCode  = regexp.MustCompile(`(?i)\bexit(?:s|ed)?(?: with)?(?: code| status)? (\d+)\b`)
	readmeExits  = regexp.MustCompile(`Exit codes: ([^\n]+(?:\n[^\n]+)*)`)
)

// The exit codes the docs name are the ones ferry's help gives, and the
// README's summary names every one of them: a new exit code (or a page
// promising one ferry never returns) fails here.
func TestDocsExitCodes(t *testing.T) {
	codes := map[string]bool{}
	for _, c := range allCommands(t) {
		var out, errb bytes.Buffer
		if code := Main(context.Background(), []string{"ferry", c.Name, "--help"}, &out, &errb); code != 0 {
			t.Fatalf("ferry %s --help: exit %d", c.Name, code)
		}
		_, exits, _ := strings.Cut(out.String(), "Exit codes:\n")
		for _, m := range helpExitCode.FindAllStringSubmatch(exits, -1) {
			codes[m[1]] = true
		}
	}
	for _, f := range docFiles(t) {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range docExitCode.FindAllStringSubmatch(string(data), -1) {
			if !codes[m[1]] {
				t.Errorf("%s: %q: no ferry command exits %s (help: %v)", rel(t, f), m[0], m[1], codes)
			}
		}
	}
	readme, err := os.ReadFile(filepath.Join(repoRoot(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := readmeExits.FindStringSubmatch(string(readme))
	if m == nil {
		t.Fatal("README.md has no 'Exit codes:' summary")
	}
	for code := range codes {
		if !regexp.MustCompile(`(?:^|\s)` + code + `\s`).MatchString(m[1]) {
			t.Errorf("README.md's exit code summary does not name %s, which ferry --help gives", code)
		}
	}
}
