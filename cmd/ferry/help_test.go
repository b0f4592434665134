package main

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

var updateGolden = flag.Bool("update", false, "rewrite the golden --help files in testdata/help")

// goldenCommands are the commands whose --help has a golden file.
var goldenCommands = []string{"push", "restore", "follow", "list", "show", "verify", "copy", "status", "flush", "commit", "prune", "agent", "doctor", "version"}

// The --help of every command, compared with testdata/help/<command>.txt
// (go test -run TestHelpGolden ./cmd/ferry -update rewrites them). Each
// flag's line names at most one default.
func TestHelpGolden(t *testing.T) {
	for _, name := range append([]string{""}, goldenCommands...) {
		args := []string{"ferry", "--help"}
		file := "ferry.txt"
		if name != "" {
			args = []string{"ferry", name, "--help"}
			file = name + ".txt"
		}
		var out, errb bytes.Buffer
		if code := Main(context.Background(), args, &out, &errb); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errb.String())
		}
		for _, line := range strings.Split(out.String(), "\n") {
			if strings.Count(line, "(default") > 1 {
				t.Errorf("%s --help: two defaults in %q", name, strings.TrimSpace(line))
			}
		}
		path := filepath.Join("testdata", "help", file)
		if *updateGolden {
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run with -update to create it)", err)
		}
		if out.String() != string(want) {
			t.Errorf("ferry %s --help differs from %s (run with -update after checking the change):\n%s", name, path, out.String())
		}
	}
}

// Every command's help has a description, an example and its exit codes,
// and every flag line says its default (bools included) or that the flag
// is required: a newcomer reads what ferry does when a flag is left out.
func TestHelpSaysDefaults(t *testing.T) {
	for _, cmd := range allCommands(t) {
		var out, errb bytes.Buffer
		if code := Main(context.Background(), []string{"ferry", cmd.Name, "--help"}, &out, &errb); code != 0 {
			t.Fatalf("%s --help: exit %d: %s", cmd.Name, code, errb.String())
		}
		help := out.String()
		for _, part := range []string{"DESCRIPTION:", "Examples:\n     ferry " + cmd.Name, "Exit codes:\n     0  "} {
			if !strings.Contains(help, part) {
				t.Errorf("ferry %s --help lacks %q", cmd.Name, part)
			}
		}
		for _, f := range cmd.VisibleFlags() {
			line := cli.FlagStringer(f)
			if f.Names()[0] == "help" {
				continue
			}
			if !strings.Contains(line, "default") && !strings.Contains(line, "(required") {
				t.Errorf("ferry %s --help: --%s says neither its default nor that it is required: %q", cmd.Name, f.Names()[0], line)
			}
		}
	}
	// A bool that defaults to true says so (it once read as off).
	if line := cli.FlagStringer(packFlag()); !strings.Contains(line, "(default: true)") {
		t.Errorf("--pack: %q, want (default: true)", line)
	}
}

// An environment variable means one thing: where two commands read the
// same FERRY_* variable, their flags have the same default. Commands whose
// limits differ (verify, copy) have variables of their own.
func TestEnvVarsOneMeaning(t *testing.T) {
	type use struct{ cmd, def string }
	seen := map[string]use{}
	for _, cmd := range allCommands(t) {
		for _, f := range cmd.Flags {
			df, ok := f.(cli.DocGenerationFlag)
			if !ok {
				continue
			}
			for _, ev := range df.GetEnvVars() {
				u := use{cmd.Name, df.GetDefaultText()}
				if prev, ok := seen[ev]; ok && prev.def != u.def {
					t.Errorf("%s is --%s of %s (default %q) and of %s (default %q): one variable, two meanings",
						ev, f.Names()[0], prev.cmd, prev.def, u.cmd, u.def)
				}
				seen[ev] = u
			}
		}
	}
}
