package main

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestToolchainPinnedEverywhere: the Go release on go.mod's go line is the
// one the Dockerfile builds with and the one the README and CONTRIBUTING
// tell people to select (the Makefile and .ci/run read go.mod).
func TestToolchainPinnedEverywhere(t *testing.T) {
	mod := readRepoFile(t, "../../go.mod")
	m := regexp.MustCompile(`(?m)^go (\d+\.\d+\.\d+)$`).FindStringSubmatch(mod)
	if m == nil {
		t.Fatal("go.mod: no go line with a full release (go 1.x.y)")
	}
	v := m[1]
	for file, want := range map[string]string{
		"../../Dockerfile":      "golang:" + v + "-bookworm",
		"../../README.md":       "GOTOOLCHAIN=go" + v,
		"../../CONTRIBUTING.md": "GOTOOLCHAIN=go" + v,
		"../../Makefile":        "export GOTOOLCHAIN := go$(GO_VERSION)",
		"../../.ci/run":         `export GOTOOLCHAIN="go$(sed -n 's/^go //p' go.mod)"`,
	} {
		if !strings.Contains(readRepoFile(t, file), want) {
			t.Errorf("%s does not select go%s (want %q in it)", file, v, want)
		}
	}
}

func readRepoFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
