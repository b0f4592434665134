package main

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/ferrylabs/ferry/internal/s3store"
)

// Variables the docs may name that no flag reads: copy's destination keys,
// the test suites' settings, the FERRY_NAME of "FERRY_NAME=value", and
// the S3 idle timeout, which internal/s3store reads for every command
// (s3store.EnvIdleTimeout).
var docOnlyVars = map[string]bool{
	s3store.EnvIdleTimeout:       true,
	"FERRY_TO_AWS_ACCESS_KEY_ID": true, "FERRY_TO_AWS_SECRET_ACCESS_KEY": true, "FERRY_TO_AWS_SESSION_TOKEN": true,
	"FERRY_VERSITYGW": true, "FERRY_CHAOS_SEED": true, "FERRY_WRITER_SUITE": true, "FERRY_S3TEST_R2RULES": true,
	"FERRY_TOXIPROXY": true, "FERRY_NAME": true, "FERRY_VERIFY_": true, "FERRY_COPY_": true, "FERRY_SEAWEEDFS": true,
}

// testSuiteVar reports whether v configures the test suites (a server, an
// endpoint to test against), which the docs name for contributors.
func testSuiteVar(v string) bool {
	return strings.HasPrefix(v, "FERRY_TEST_") || strings.HasPrefix(v, "FERRY_S3TEST_")
}

var (
	docVar     = regexp.MustCompile(`\bFERRY_[A-Z0-9_]+`)
	docCommand = regexp.MustCompile(`\bferry (push|restore|list|show|verify|copy|prune|agent|status|flush|doctor|version)\b([^\n` + "`" + `|]*)`)
	docFlag    = regexp.MustCompile(`(?:^|\s)(--[a-z][a-z0-9-]*)`)
)

// Every FERRY_* variable the docs name is read by a flag of ferry, and
// every --flag written after `ferry COMMAND` on a line of the docs is a
// flag of that command: a renamed or removed flag fails here rather than
// in a user's job script.
func TestDocsNameRealFlags(t *testing.T) {
	flags := map[string]map[string]bool{}
	vars := map[string]bool{}
	for _, c := range []*cli.Command{newPushCommand(), newRestoreCommand(), newListCommand(), newShowCommand(), newVerifyCommand(),
		newCopyCommand(), newPruneCommand(), newAgentCommand(), newStatusCommand(), newFlushCommand(), newVersionCommand(), newDoctorCommand()} {
		flags[c.Name] = map[string]bool{"--help": true, "-h": true}
		for _, f := range c.Flags {
			for _, n := range f.Names() {
				flags[c.Name]["--"+n] = true
			}
			if ev, ok := f.(interface{ GetEnvVars() []string }); ok {
				for _, v := range ev.GetEnvVars() {
					vars[v] = true
				}
			}
		}
	}
	for _, f := range docFiles(t) {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		text := string(data)
		for _, v := range docVar.FindAllString(text, -1) {
			if !vars[v] && !docOnlyVars[v] && !testSuiteVar(v) {
				t.Errorf("%s names %s, which no ferry flag reads", rel(t, f), v)
			}
		}
		for _, line := range strings.Split(text, "\n") {
			for _, m := range docCommand.FindAllStringSubmatch(line, -1) {
				rest := m[2]
				// Another command on the line ends this one's flags.
				if i := strings.IndexAny(rest, ";&|("); i >= 0 {
					rest = rest[:i]
				}
				if i := strings.Index(rest, " # "); i >= 0 {
					rest = rest[:i]
				}
				for _, fm := range docFlag.FindAllStringSubmatch(rest, -1) {
					flag, _, _ := strings.Cut(fm[1], "=")
					if !flags[m[1]][flag] {
						t.Errorf("%s: ferry %s %s: no such flag (%q)", rel(t, f), m[1], flag, strings.TrimSpace(line))
					}
				}
			}
		}
	}
}
