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

// Every `ferry version` line the docs show names the Go release a build
// from this checkout stamps (go.mod's), not an older one a page was
// written with.
func TestDocsVersionLinesNameTheToolchain(t *testing.T) {
	m := regexp.MustCompile(`(?m)^go (\d+\.\d+\.\d+)$`).FindStringSubmatch(readRepoFile(t, "../../go.mod"))
	if m == nil {
		t.Fatal("go.mod: no go line with a full release (go 1.x.y)")
	}
	versionLine := regexp.MustCompile(`(?m)^ferry \S+ commit [0-9a-f]{7,40} (go[0-9.]+) \S+$`)
	found := 0
	for _, f := range docFiles(t) {
		for _, l := range versionLine.FindAllStringSubmatch(readRepoFile(t, f), -1) {
			found++
			if l[1] != "go"+m[1] {
				t.Errorf("%s shows %q: a build from this checkout says go%s", rel(t, f), l[0], m[1])
			}
		}
	}
	if found == 0 {
		t.Error("no `ferry version` output line found in the docs")
	}
}
