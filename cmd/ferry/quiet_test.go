package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// TestQuietOnEveryCommand: -q is accepted by every command (issue 48 item
// 4: `ferry flush -q` was refused as a usage error while other commands
// took it). The commands are those with a help golden.
func TestQuietOnEveryCommand(t *testing.T) {
	goldens, _ := filepath.Glob("testdata/help/*.txt")
	n := 0
	for _, g := range goldens {
		cmd := strings.TrimSuffix(filepath.Base(g), ".txt")
		if cmd == "ferry" {
			continue
		}
		n++
		var out, errOut bytes.Buffer
		if code := Main(context.Background(), []string{"ferry", cmd, "-q", "--help"}, &out, &errOut); code != 0 {
			t.Errorf("ferry %s -q --help: exit %d: %s", cmd, code, errOut.String())
		}
		if !strings.Contains(out.String(), "--quiet, -q") {
			t.Errorf("ferry %s --help does not list --quiet, -q", cmd)
		}
	}
	if n < 12 {
		t.Fatalf("%d commands with a help golden", n)
	}
}
