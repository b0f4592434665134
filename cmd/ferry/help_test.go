package main

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var updateGolden = flag.Bool("update", false, "rewrite the golden --help files in testdata/help")

// The --help of every command, compared with testdata/help/<command>.txt
// (go test -run TestHelpGolden ./cmd/ferry -update rewrites them). Each
// flag's line names at most one default.
func TestHelpGolden(t *testing.T) {
	cmds := []string{"", "push", "restore", "list", "show", "verify", "copy", "status", "flush", "prune", "agent", "doctor"}
	for _, name := range cmds {
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
