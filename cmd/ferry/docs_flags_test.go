package main

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

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
	// What ferry sets for the commands it runs (follow --exec, agent --on-commit).
	"FERRY_STEP": true, "FERRY_STEP_DIR": true, "FERRY_REVISION": true, "FERRY_DESTINATION": true, "FERRY_FILES": true, "FERRY_BYTES": true,
}

// testSuiteVar reports whether v configures the test suites (a server, an
// endpoint to test against), which the docs name for contributors.
func testSuiteVar(v string) bool {
	return strings.HasPrefix(v, "FERRY_TEST_") || strings.HasPrefix(v, "FERRY_S3TEST_")
}

var (
	docVar     = regexp.MustCompile(`\bFERRY_[A-Z0-9_]+`)
	docCommand = regexp.MustCompile(`\bferry (push|restore|follow|list|show|verify|copy|prune|agent|status|flush|commit|doctor|version)\b([^\n` + "`" + `|]*)`)
	docFlag    = regexp.MustCompile(`(?:^|[\s\[])(--[a-z][a-z0-9-]*)`) // "[--layout auto]" too
)

// Every FERRY_* variable the docs name is read by a flag of ferry, and
// every --flag written after `ferry COMMAND` on a line of the docs is a
// flag of that command: a renamed or removed flag fails here rather than
// in a user's job script.
func TestDocsNameRealFlags(t *testing.T) {
	flags := map[string]map[string]bool{}
	vars := map[string]bool{}
	for _, c := range allCommands(t) {
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
		// A command continued on the next line (a trailing backslash) is
		// one line; its flags there are checked too.
		for _, line := range strings.Split(strings.ReplaceAll(text, "\\\n", " "), "\n") {
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

// docVarCommands is "`FERRY_X` (cmd, cmd, ...)" or "(cmd, cmd: ...)": a
// doc saying which commands read a variable.
var docVarCommands = regexp.MustCompile("`(FERRY_[A-Z0-9_]+)` \\(([a-z]+(?:,\\s+[a-z]+)+)[):]")

// Where the docs list the commands that read a FERRY_* variable, the list
// is complete and right: a job environment set for one command retunes
// every other one that reads the variable, and a reader must know which.
// (A list of one, or one naming a container, says where it is set, not
// who reads it, and is not checked.)
func TestDocsEnvVarCommandLists(t *testing.T) {
	readers := map[string]map[string]bool{}
	names := map[string]bool{}
	for _, c := range allCommands(t) {
		names[c.Name] = true
		for _, f := range c.Flags {
			if ev, ok := f.(interface{ GetEnvVars() []string }); ok {
				for _, v := range ev.GetEnvVars() {
					if readers[v] == nil {
						readers[v] = map[string]bool{}
					}
					readers[v][c.Name] = true
				}
			}
		}
	}
	for _, f := range docFiles(t) {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		text := strings.Join(strings.Fields(string(data)), " ")
	matches:
		for _, m := range docVarCommands.FindAllStringSubmatch(text, -1) {
			listed := strings.Split(strings.Join(strings.Fields(m[2]), " "), ", ")
			for _, c := range listed {
				if !names[c] {
					continue matches
				}
			}
			var want []string
			for c := range readers[m[1]] {
				want = append(want, c)
			}
			sort.Strings(want)
			sort.Strings(listed)
			if strings.Join(listed, ", ") != strings.Join(want, ", ") {
				t.Errorf("%s: %s read by %s, says the page; ferry: %s", rel(t, f), m[1], strings.Join(listed, ", "), strings.Join(want, ", "))
			}
		}
	}
}

// docFlagValue is "`--flag` (VALUE)" or "`--flag` (default VALUE)", VALUE
// a number with a unit: the docs stating a flag's default.
var docFlagValue = regexp.MustCompile("`--([a-z][a-z0-9-]*)` \\((?:default:? )?([0-9][0-9.]*\\s?[A-Za-z/]*)\\)")

// sameDefault reports whether a default as the docs write it ("60 s",
// "2 min", "64 MiB") is the one help shows ("1m0s", "2m0s", "64MiB").
func sameDefault(doc, help string) bool {
	norm := func(s string) string {
		s = strings.ReplaceAll(strings.Trim(s, `"`), " ", "")
		return strings.TrimSuffix(strings.TrimSuffix(s, "in"), "ec") // min -> m, sec -> s
	}
	d, h := norm(doc), norm(help)
	if dd, err := time.ParseDuration(d); err == nil {
		hd, err := time.ParseDuration(h)
		return err == nil && dd == hd
	}
	return strings.EqualFold(d, h)
}

// A default the docs state for a flag ("`--settle` (default 5 s)") is the
// default some command's --help shows for it: a changed default fails
// here, not in a reader's sizing of a job.
func TestDocsFlagDefaults(t *testing.T) {
	defaults := map[string][]string{}
	for _, c := range allCommands(t) {
		for _, f := range c.Flags {
			defaults[f.Names()[0]] = append(defaults[f.Names()[0]], shownDefault(f))
		}
	}
	checked := 0
	for _, f := range docFiles(t) {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
	matches:
		for _, m := range docFlagValue.FindAllStringSubmatch(strings.Join(strings.Fields(string(data)), " "), -1) {
			checked++
			for _, d := range defaults[m[1]] {
				if sameDefault(m[2], d) {
					continue matches
				}
			}
			t.Errorf("%s: --%s (%s), says the page; --help: %q", rel(t, f), m[1], m[2], defaults[m[1]])
		}
	}
	if checked == 0 {
		t.Error("no `--flag` (default) found in the docs")
	}
}

// The variables ferry reads without a flag of their own are in the
// command reference, with what they do: no --help shows them.
func TestReferenceNamesFlaglessVars(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "reference.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{s3store.EnvIdleTimeout, "FERRY_TO_AWS_ACCESS_KEY_ID", "FERRY_TO_AWS_SECRET_ACCESS_KEY",
		"FERRY_TO_AWS_SESSION_TOKEN", "FERRY_PEER_TOKEN", "S3_ENDPOINT_URL", "AWS_CA_BUNDLE", "XDG_STATE_HOME"} {
		if !strings.Contains(string(data), "`"+v+"`") && !strings.Contains(string(data), v+";") {
			t.Errorf("docs/reference.md does not name %s, which ferry reads without a flag of its own", v)
		}
	}
}
