package main

import (
	"bytes"
	"context"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

// ferry version prints one line with the version, the commit and Go's.
func TestVersionCommand(t *testing.T) {
	var out, errb bytes.Buffer
	if code := Main(context.Background(), []string{"ferry", "version"}, &out, &errb); code != 0 {
		t.Fatalf("ferry version: exit %d: %s", code, errb.String())
	}
	want := regexp.MustCompile(`^ferry ` + regexp.QuoteMeta(version) + ` commit \S+ ` + regexp.QuoteMeta(runtime.Version()) + ` ` + runtime.GOOS + `/` + runtime.GOARCH + "\n$")
	if !want.MatchString(out.String()) {
		t.Errorf("ferry version printed %q, want %s", out.String(), want)
	}
	out.Reset()
	errb.Reset()
	if code := Main(context.Background(), []string{"ferry", "version", "extra"}, &out, &errb); code != exitUsage {
		t.Errorf("ferry version extra: exit %d, want %d", code, exitUsage)
	}
}

func TestVersionCommit(t *testing.T) {
	info := func(settings ...debug.BuildSetting) func() (*debug.BuildInfo, bool) {
		return func() (*debug.BuildInfo, bool) { return &debug.BuildInfo{Settings: settings}, true }
	}
	rev := debug.BuildSetting{Key: "vcs.revision", Value: "940079d1"}
	cases := []struct {
		stamped string
		read    func() (*debug.BuildInfo, bool)
		want    string
	}{
		{"abc123", info(rev), "abc123"}, // -X main.commit wins
		{"", info(rev), "940079d1"},
		{"", info(rev, debug.BuildSetting{Key: "vcs.modified", Value: "true"}), "940079d1-dirty"},
		{"", info(), "unknown"},
		{"", func() (*debug.BuildInfo, bool) { return nil, false }, "unknown"},
	}
	for _, c := range cases {
		if got := buildCommit(c.stamped, c.read); got != c.want {
			t.Errorf("buildCommit(%q, ...) = %q, want %q", c.stamped, got, c.want)
		}
	}
	var out bytes.Buffer
	if err := printVersion(&out, "v1.2.3", "abc123"); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "ferry v1.2.3 commit abc123 go") {
		t.Errorf("printVersion: %q", out.String())
	}
}
