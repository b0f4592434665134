package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/urfave/cli/v2"
)

// commit is the source revision, set at build time with
// -ldflags "-X main.commit=..." (make release does). Without it the
// revision Go recorded in the binary is used, when there is one.
var commit = ""

func newVersionCommand() *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print the version, the source commit and the Go version ferry was built with",
		Description: commandDoc{
			about:    "Prints one line naming exactly which binary runs, for a job log or a bug report.",
			examples: []string{"ferry version"},
			exits:    []string{"0 printed", "2 an argument was given"},
		}.String(),
		// -q as every command takes it; version prints its one line either way.
		Flags: []cli.Flag{&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, EnvVars: []string{"FERRY_QUIET"}, Usage: "accepted as by every command; the line is printed either way"}},
		Action: func(c *cli.Context) error {
			if c.Args().Len() > 0 {
				return usagef("version takes no arguments (got %q)", c.Args().First())
			}
			return printVersion(c.App.Writer, version, buildCommit(commit, debug.ReadBuildInfo))
		},
	}
}

// printVersion writes one line, e.g.
// "ferry v1.2.0 commit 940079d go1.26.10 linux/amd64", so that a job log
// or a bug report names exactly which binary ran.
func printVersion(w io.Writer, version, commit string) error {
	_, err := fmt.Fprintf(w, "ferry %s commit %s %s %s/%s\n", version, commit, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return err
}

// buildCommit is the commit stamped with -ldflags, else the VCS revision
// `go build` recorded (with "-dirty" when the tree had changes), else
// "unknown".
func buildCommit(stamped string, readBuildInfo func() (*debug.BuildInfo, bool)) string {
	if stamped != "" {
		return stamped
	}
	info, ok := readBuildInfo()
	if !ok {
		return "unknown"
	}
	var rev, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	switch {
	case rev == "":
		return "unknown"
	case modified == "true":
		return rev + "-dirty"
	}
	return rev
}
